#pragma once
// Tiny layers for testing the framework itself (graph, gradcheck), with
// gradients simple enough to derive by hand in the tests.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>

#include "plexus/builtin_layers.h"
#include "plexus/layer.h"
#include "plexus/registry.h"

namespace plexus::test {

// y = a * x, one scalar parameter "a" initialised to `initial`. The "bug"
// param plants a classic mistake for the gradient checker to catch:
// "assign" sets the parameter gradient (=) instead of adding to it (+=),
// "negate" flips the sign of the input gradient.
class ScaleLayer : public Layer {
 public:
  explicit ScaleLayer(LayerConfig& config)
      : initial_(config.number("initial", 2.0)), bug_(config.text("bug", "none")) {}
  std::vector<Shape> output_shapes(const std::vector<Shape>& in) const override {
    if (in.size() != 1) fail_shape("takes 1 input");
    return {in[0]};
  }
  void create_parameters(const std::vector<Shape>&) override { declare_parameter("a", {1}, init::constant(initial_)); }

 protected:
  void forward_cpu(Context&, const ConstTensors& in, const MutableTensors& out) override {
    double a = parameter("a").value.to_values()[0];
    std::vector<double> x = in[0]->to_values();
    for (auto& v : x) v *= a;
    out[0]->copy_from(Tensor::from_values(x, in[0]->shape(), in[0]->dtype()));
  }
  void backward_cpu(Context&, const ConstTensors& in, const ConstTensors&, const ConstTensors& dout,
                    const MutableTensors& din) override {
    double a = parameter("a").value.to_values()[0];
    std::vector<double> x = in[0]->to_values(), dy = dout[0]->to_values();
    double da = 0.0;
    for (std::size_t i = 0; i < x.size(); ++i) da += dy[i] * x[i];
    Parameter& p = parameter("a");
    const double previous = bug_ == "assign" ? 0.0 : p.grad.to_values()[0];
    p.grad.copy_from(Tensor::from_values({previous + da}, {1}, p.grad.dtype()));
    if (din[0]) {
      for (auto& v : dy) v *= bug_ == "negate" ? -a : a;
      din[0]->copy_from(Tensor::from_values(dy, in[0]->shape(), in[0]->dtype()));
    }
  }

 private:
  double initial_;
  std::string bug_;
};

// y = x1 + x2 (equal shapes).
class AddLayer : public Layer {
 public:
  explicit AddLayer(LayerConfig&) {}
  std::vector<Shape> output_shapes(const std::vector<Shape>& in) const override {
    if (in.size() != 2) fail_shape("takes 2 inputs");
    if (in[0] != in[1]) fail_shape("input shapes differ: " + shape_str(in[0]) + " vs " + shape_str(in[1]));
    return {in[0]};
  }

 protected:
  void forward_cpu(Context&, const ConstTensors& in, const MutableTensors& out) override {
    std::vector<double> a = in[0]->to_values(), b = in[1]->to_values();
    for (std::size_t i = 0; i < a.size(); ++i) a[i] += b[i];
    out[0]->copy_from(Tensor::from_values(a, in[0]->shape(), in[0]->dtype()));
  }
  void backward_cpu(Context&, const ConstTensors&, const ConstTensors&, const ConstTensors& dout,
                    const MutableTensors& din) override {
    for (Tensor* g : din)
      if (g) g->copy_from(*dout[0]);
  }
};

// Scalar y = sum(x).
class SumLayer : public Layer {
 public:
  explicit SumLayer(LayerConfig&) {}
  std::vector<Shape> output_shapes(const std::vector<Shape>& in) const override {
    if (in.size() != 1) fail_shape("takes 1 input");
    return {Shape{}};
  }

 protected:
  void forward_cpu(Context&, const ConstTensors& in, const MutableTensors& out) override {
    double total = 0.0;
    for (double v : in[0]->to_values()) total += v;
    out[0]->copy_from(Tensor::from_values({total}, {}, in[0]->dtype()));
  }
  void backward_cpu(Context&, const ConstTensors& in, const ConstTensors&, const ConstTensors& dout,
                    const MutableTensors& din) override {
    if (!din[0]) return;
    double g = dout[0]->to_values()[0];
    din[0]->copy_from(Tensor::from_values(std::vector<double>(static_cast<std::size_t>(in[0]->numel()), g),
                                          in[0]->shape(), in[0]->dtype()));
  }
};

// y = x^2 with a deliberately WRONG backward (dx = x instead of 2x): the
// gradient checker must catch it.
class BrokenSquareLayer : public Layer {
 public:
  explicit BrokenSquareLayer(LayerConfig&) {}
  std::vector<Shape> output_shapes(const std::vector<Shape>& in) const override { return {in.at(0)}; }

 protected:
  void forward_cpu(Context&, const ConstTensors& in, const MutableTensors& out) override {
    std::vector<double> x = in[0]->to_values();
    for (auto& v : x) v *= v;
    out[0]->copy_from(Tensor::from_values(x, in[0]->shape(), in[0]->dtype()));
  }
  void backward_cpu(Context&, const ConstTensors& in, const ConstTensors&, const ConstTensors& dout,
                    const MutableTensors& din) override {
    std::vector<double> x = in[0]->to_values(), dy = dout[0]->to_values();
    for (std::size_t i = 0; i < x.size(); ++i) x[i] *= dy[i];  // should be 2 * x * dy
    din[0]->copy_from(Tensor::from_values(x, in[0]->shape(), in[0]->dtype()));
  }
};

// y = a * s * x: a learnable scalar "a" (initial 2) and a buffer "s"
// (initial 3, Layer::declare_buffer), which backward gives no gradient.
// after_update(t) records t and clamps a to at most 1, like a constraint a
// layer keeps on its parameters after each optimiser update.
class BufferedScaleLayer : public Layer {
 public:
  explicit BufferedScaleLayer(LayerConfig&) {}
  std::vector<Shape> output_shapes(const std::vector<Shape>& in) const override {
    if (in.size() != 1) fail_shape("takes 1 input");
    return {in[0]};
  }
  void create_parameters(const std::vector<Shape>&) override {
    declare_parameter("a", {1}, init::constant(2.0));
    declare_buffer("s", {1}, init::constant(3.0));
  }
  void after_update(Context&, std::int64_t updates_taken) override {
    last_update = updates_taken;
    Parameter& a = parameter("a");
    a.value.copy_from(Tensor::from_values({std::min(1.0, a.value.to_values()[0])}, {1}, a.value.dtype()));
  }
  std::int64_t last_update = 0;

 protected:
  void forward_cpu(Context&, const ConstTensors& in, const MutableTensors& out) override {
    const double scale = parameter("a").value.to_values()[0] * parameter("s").value.to_values()[0];
    std::vector<double> x = in[0]->to_values();
    for (auto& v : x) v *= scale;
    out[0]->copy_from(Tensor::from_values(x, in[0]->shape(), in[0]->dtype()));
  }
  void backward_cpu(Context&, const ConstTensors& in, const ConstTensors&, const ConstTensors& dout,
                    const MutableTensors& din) override {
    const double a = parameter("a").value.to_values()[0], s = parameter("s").value.to_values()[0];
    std::vector<double> x = in[0]->to_values(), dy = dout[0]->to_values();
    double da = 0.0;
    for (std::size_t i = 0; i < x.size(); ++i) da += dy[i] * x[i] * s;
    Parameter& p = parameter("a");
    p.grad.copy_from(Tensor::from_values({p.grad.to_values()[0] + da}, {1}, p.grad.dtype()));
    if (din[0]) {
      for (auto& v : dy) v *= a * s;
      din[0]->copy_from(Tensor::from_values(dy, in[0]->shape(), in[0]->dtype()));
    }
  }
};

inline Registry test_registry() {
  Registry registry = builtin_registry();
  registry.add("TestScale", [](LayerConfig& c) { return std::make_unique<ScaleLayer>(c); });
  registry.add("TestAdd", [](LayerConfig& c) { return std::make_unique<AddLayer>(c); });
  registry.add("TestSum", [](LayerConfig& c) { return std::make_unique<SumLayer>(c); });
  registry.add("TestBrokenSquare", [](LayerConfig& c) { return std::make_unique<BrokenSquareLayer>(c); });
  registry.add("TestBufferedScale", [](LayerConfig& c) { return std::make_unique<BufferedScaleLayer>(c); });
  return registry;
}

}  // namespace plexus::test

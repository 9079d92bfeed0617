#pragma once
// Optimisers: SGD with momentum, and Adam (Kingma & Ba 2015). Each parameter's
// state (momentum, first/second moments) lives on the parameter's device and
// is named "<state>/<parameter name>" for checkpoints.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "plexus/context.h"
#include "plexus/net.h"

namespace plexus {

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // One update of every parameter from its accumulated gradient.
  virtual void step(Context& ctx, const std::vector<NamedParameter>& parameters) = 0;
  virtual std::string name() const = 0;
  double learning_rate() const { return learning_rate_; }
  void set_learning_rate(double lr) { learning_rate_ = lr; }
  std::int64_t steps_taken() const { return steps_; }

  // State tensors by name, for checkpoints; load_state checks names and shapes.
  std::map<std::string, Tensor> state() const;
  void load_state(const std::map<std::string, Tensor>& state, std::int64_t steps);

 protected:
  explicit Optimizer(double learning_rate) : learning_rate_(learning_rate) {}
  // The state tensor `kind` ("m", "v", "momentum") of parameter `name`,
  // created zero-filled like `like` on first use.
  Tensor& slot(const std::string& kind, const std::string& name, const Tensor& like);
  double learning_rate_;
  std::int64_t steps_ = 0;
  std::map<std::string, Tensor> slots_;
};

class Sgd : public Optimizer {
 public:
  // v = momentum * v + g;  w -= lr * v
  Sgd(double learning_rate, double momentum = 0.9);
  void step(Context& ctx, const std::vector<NamedParameter>& parameters) override;
  std::string name() const override { return "SGD"; }

 private:
  double momentum_;
};

class Adam : public Optimizer {
 public:
  // m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
  // w -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
  Adam(double learning_rate, double beta1 = 0.9, double beta2 = 0.999, double epsilon = 1e-8);
  void step(Context& ctx, const std::vector<NamedParameter>& parameters) override;
  std::string name() const override { return "Adam"; }

 private:
  double beta1_, beta2_, epsilon_;
};

}  // namespace plexus

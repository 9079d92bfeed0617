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

namespace cuda {
struct AdamDevice;  // the fused CUDA update's tables; framework/src/cuda/optimizer.cu
}

class Optimizer {
 public:
  virtual ~Optimizer();
  // One update of every parameter from its accumulated gradient:
  // begin_step(), then apply().
  void step(Context& ctx, const std::vector<NamedParameter>& parameters);
  // The host half of a step: every check and state lookup, the step
  // counted, and its hyperparameters (learning rate, bias corrections)
  // fixed; on CUDA they are written to device memory on the context's
  // stream, where apply() reads them.
  virtual void begin_step(Context& ctx, const std::vector<NamedParameter>& parameters) = 0;
  // The update itself, from what begin_step() fixed, for the same parameters.
  virtual void apply(Context& ctx, const std::vector<NamedParameter>& parameters) = 0;
  // Whether apply() on CUDA may be recorded once into a CUDA graph and
  // replayed with new hyperparameters (plexus/step_graph.h): true when it
  // reads them from device memory rather than baking them into launches.
  virtual bool cuda_graph_capturable() const { return false; }
  virtual std::string name() const = 0;
  double learning_rate() const { return learning_rate_; }
  void set_learning_rate(double lr) { learning_rate_ = lr; }
  std::int64_t steps_taken() const { return steps_; }

  // State tensors by name, for checkpoints; load_state checks names and shapes.
  // Virtual, like name(), so that save_checkpoint and load_checkpoint in
  // libplexus call them through the object without linking libplexus_train,
  // where the optimisers are defined.
  virtual std::map<std::string, Tensor> state() const;
  virtual void load_state(const std::map<std::string, Tensor>& state, std::int64_t steps);

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
  void begin_step(Context& ctx, const std::vector<NamedParameter>& parameters) override;
  void apply(Context& ctx, const std::vector<NamedParameter>& parameters) override;
  std::string name() const override { return "SGD"; }

 private:
  double momentum_;
  double step_learning_rate_ = 0;  // fixed by begin_step
};

class Adam : public Optimizer {
 public:
  // m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
  // w -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
  // On CUDA every parameter is updated by one fused launch per dtype,
  // reading lr and the bias corrections from device memory.
  Adam(double learning_rate, double beta1 = 0.9, double beta2 = 0.999, double epsilon = 1e-8);
  ~Adam() override;
  void begin_step(Context& ctx, const std::vector<NamedParameter>& parameters) override;
  void apply(Context& ctx, const std::vector<NamedParameter>& parameters) override;
  bool cuda_graph_capturable() const override { return true; }
  std::string name() const override { return "Adam"; }

 private:
  double beta1_, beta2_, epsilon_;
  // Fixed by begin_step for apply: lr, 1 - b1^t, 1 - b2^t.
  double step_learning_rate_ = 0, correction1_ = 1, correction2_ = 1;
  std::unique_ptr<cuda::AdamDevice, void (*)(cuda::AdamDevice*)> device_{nullptr, nullptr};
};

}  // namespace plexus

#include "plexus/optimizer.h"

#include <cmath>
#include <sstream>

#include "optimizer_kernels.h"
#include "plexus/error.h"

namespace plexus {

namespace {

// The parameter's value and gradient must agree before any update.
void check_parameter(const NamedParameter& named, const std::string& optimizer) {
  const Parameter* p = named.parameter;
  if (!p || !p->value.defined() || !p->grad.defined())
    throw Error(optimizer + ": parameter '" + named.name + "' has no value or gradient allocated");
  if (p->grad.shape() != p->value.shape() || p->grad.dtype() != p->value.dtype() ||
      p->grad.device() != p->value.device())
    throw Error(optimizer + ": parameter '" + named.name + "' is " + p->value.describe() + " but its gradient is " +
                p->grad.describe());
}

void check_hyperparameter(bool ok, const std::string& optimizer, const char* name, double value, const char* rule) {
  if (ok) return;
  std::ostringstream message;
  message << optimizer << ": " << name << " must be " << rule << ", got " << value;
  throw ConfigError(message.str());
}

}  // namespace

Optimizer::~Optimizer() = default;

void Optimizer::step(Context& ctx, const std::vector<NamedParameter>& parameters) {
  begin_step(ctx, parameters);
  apply(ctx, parameters);
}

std::map<std::string, Tensor> Optimizer::state() const {
  std::map<std::string, Tensor> copies;  // a snapshot: later steps do not change it
  for (const auto& entry : slots_) copies[entry.first] = entry.second.clone();
  return copies;
}

void Optimizer::load_state(const std::map<std::string, Tensor>& state, std::int64_t steps) {
  if (steps < 0)
    throw Error(name() + ": cannot load optimiser state with a negative step count " + std::to_string(steps));
  std::map<std::string, Tensor> loaded;
  for (const auto& entry : state) {
    const std::string& key = entry.first;
    std::size_t slash = key.find('/');
    if (slash == std::string::npos || slash == 0 || slash + 1 == key.size())
      throw Error(name() + ": optimiser state name '" + key + "' is not of the form '<state>/<parameter>'");
    if (!entry.second.defined()) throw Error(name() + ": optimiser state '" + key + "' is an undefined tensor");
    auto existing = slots_.find(key);
    if (existing != slots_.end() && existing->second.shape() != entry.second.shape())
      throw Error(name() + ": optimiser state '" + key + "' is " + shape_str(entry.second.shape()) +
                  " but this optimiser holds it as " + shape_str(existing->second.shape()));
    loaded[key] = entry.second.clone();
  }
  slots_ = std::move(loaded);
  steps_ = steps;
}

Tensor& Optimizer::slot(const std::string& kind, const std::string& name, const Tensor& like) {
  const std::string key = kind + "/" + name;
  auto it = slots_.find(key);
  if (it == slots_.end()) return slots_[key] = Tensor(like.shape(), like.dtype(), like.device());
  Tensor& state = it->second;
  if (state.shape() != like.shape())
    throw Error(this->name() + ": optimiser state '" + key + "' is " + shape_str(state.shape()) + " but parameter '" +
                name + "' is " + shape_str(like.shape()));
  // Loaded state may come from a checkpoint in another dtype or on the CPU.
  if (state.dtype() != like.dtype()) state = state.to(like.dtype());
  if (state.device() != like.device()) state = state.to(like.device());
  return state;
}

Sgd::Sgd(double learning_rate, double momentum) : Optimizer(learning_rate), momentum_(momentum) {
  check_hyperparameter(std::isfinite(learning_rate) && learning_rate >= 0, "SGD", "learning_rate", learning_rate,
                       ">= 0");
  check_hyperparameter(momentum >= 0 && momentum < 1, "SGD", "momentum", momentum, "in [0, 1)");
}

void Sgd::begin_step(Context&, const std::vector<NamedParameter>& parameters) {
  // Every check (and every state lookup, which checks shapes) before any
  // update, so a bad parameter leaves all of them untouched.
  for (const NamedParameter& named : parameters) {
    if (!named.parameter->trainable) continue;  // a buffer: the layer's own state
    check_parameter(named, name());
    slot("momentum", named.name, named.parameter->value);
  }
  step_learning_rate_ = learning_rate_;
  ++steps_;
}

void Sgd::apply(Context& ctx, const std::vector<NamedParameter>& parameters) {
  for (const NamedParameter& named : parameters) {
    if (!named.parameter->trainable) continue;
    Parameter& p = *named.parameter;
    Tensor& velocity = slot("momentum", named.name, p.value);
    if (p.value.device().is_cuda()) {
      cuda::sgd_update(ctx, p.value, p.grad, velocity, step_learning_rate_, momentum_);
      continue;
    }
    dispatch_float(p.value.dtype(), [&](auto zero) {
      using T = decltype(zero);
      T* w = p.value.data<T>();
      const T* g = p.grad.data<T>();
      T* v = velocity.data<T>();
      const T lr = static_cast<T>(step_learning_rate_), mu = static_cast<T>(momentum_);
      for (std::int64_t i = 0; i < p.value.numel(); ++i) {
        v[i] = mu * v[i] + g[i];
        w[i] -= lr * v[i];
      }
    });
  }
}

Adam::Adam(double learning_rate, double beta1, double beta2, double epsilon)
    : Optimizer(learning_rate), beta1_(beta1), beta2_(beta2), epsilon_(epsilon) {
  check_hyperparameter(std::isfinite(learning_rate) && learning_rate >= 0, "Adam", "learning_rate", learning_rate,
                       ">= 0");
  check_hyperparameter(beta1 >= 0 && beta1 < 1, "Adam", "beta1", beta1, "in [0, 1)");
  check_hyperparameter(beta2 >= 0 && beta2 < 1, "Adam", "beta2", beta2, "in [0, 1)");
  check_hyperparameter(epsilon > 0 && std::isfinite(epsilon), "Adam", "epsilon", epsilon, "> 0");
}

Adam::~Adam() = default;

void Adam::begin_step(Context& ctx, const std::vector<NamedParameter>& parameters) {
  std::vector<cuda::AdamTensors> on_gpu;  // looked up before any update, as in Sgd::begin_step
  for (const NamedParameter& named : parameters) {
    if (!named.parameter->trainable) continue;  // a buffer: the layer's own state
    check_parameter(named, name());
    Parameter& p = *named.parameter;
    Tensor& m = slot("m", named.name, p.value);
    Tensor& v = slot("v", named.name, p.value);
    if (p.value.device().is_cuda()) on_gpu.push_back({&p.value, &p.grad, &m, &v});
  }
  ++steps_;
  const double t = static_cast<double>(steps_);
  step_learning_rate_ = learning_rate_;
  correction1_ = 1.0 - std::pow(beta1_, t);  // 1 - b1^t
  correction2_ = 1.0 - std::pow(beta2_, t);  // 1 - b2^t
  if (on_gpu.empty()) return;
  if (!device_) device_ = {cuda::create_adam_device(), &cuda::destroy_adam_device};
  cuda::adam_prepare(ctx, *device_, on_gpu, step_learning_rate_, correction1_, correction2_);
}

void Adam::apply(Context& ctx, const std::vector<NamedParameter>& parameters) {
  bool any_gpu = false;
  for (const NamedParameter& named : parameters) {
    if (!named.parameter->trainable) continue;
    Parameter& p = *named.parameter;
    if (p.value.device().is_cuda()) {
      any_gpu = true;
      continue;
    }
    Tensor& m = slot("m", named.name, p.value);
    Tensor& v = slot("v", named.name, p.value);
    dispatch_float(p.value.dtype(), [&](auto zero) {
      using T = decltype(zero);
      T* w = p.value.data<T>();
      const T* g = p.grad.data<T>();
      T* first = m.data<T>();
      T* second = v.data<T>();
      const T lr = static_cast<T>(step_learning_rate_), b1 = static_cast<T>(beta1_), b2 = static_cast<T>(beta2_);
      const T eps = static_cast<T>(epsilon_), c1 = static_cast<T>(correction1_), c2 = static_cast<T>(correction2_);
      for (std::int64_t i = 0; i < p.value.numel(); ++i) {
        first[i] = b1 * first[i] + (T(1) - b1) * g[i];
        second[i] = b2 * second[i] + (T(1) - b2) * g[i] * g[i];
        w[i] -= lr * (first[i] / c1) / (std::sqrt(second[i] / c2) + eps);
      }
    });
  }
  if (any_gpu) {
    if (!device_) throw Error("Adam: apply() on CUDA parameters without begin_step()");
    cuda::adam_apply(ctx, *device_, beta1_, beta2_, epsilon_);
  }
}

}  // namespace plexus

#if !PLEXUS_WITH_CUDA
// The CUDA updates' entry points in a build without CUDA: no parameter can
// live on a GPU there, so they are unreachable; they throw if reached.
namespace plexus::cuda {

void sgd_update(Context&, Tensor& weight, const Tensor&, Tensor&, double, double) {
  throw DeviceError("no CUDA in this build for " + weight.describe());
}
struct AdamDevice {};
AdamDevice* create_adam_device() { return new AdamDevice; }
void destroy_adam_device(AdamDevice* device) noexcept { delete device; }
void adam_prepare(Context&, AdamDevice&, const std::vector<AdamTensors>& tensors, double, double, double) {
  throw DeviceError("no CUDA in this build for " + tensors.at(0).weight->describe());
}
void adam_apply(Context&, AdamDevice&, double, double, double) { throw DeviceError("no CUDA in this build"); }

}  // namespace plexus::cuda
#endif

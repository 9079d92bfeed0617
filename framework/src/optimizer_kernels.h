#pragma once
// The CUDA halves of the optimiser updates (framework/src/cuda/optimizer.cu;
// stubs at the end of optimizer.cpp when built without CUDA). Every tensor has
// the same shape, dtype and device; the caller checks.
#include <vector>

#include "plexus/context.h"
#include "plexus/optimizer.h"
#include "plexus/tensor.h"

namespace plexus::cuda {

// velocity = momentum * velocity + grad;  weight -= learning_rate * velocity
void sgd_update(Context& ctx, Tensor& weight, const Tensor& grad, Tensor& velocity, double learning_rate,
                double momentum);

// Adam over many parameters in one launch per dtype:
//   m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2;
//   weight -= lr * (m / correction1) / (sqrt(v / correction2) + epsilon),
// with correction1 = 1 - beta1^t and correction2 = 1 - beta2^t. lr and the
// corrections are read from device memory, so a recorded launch can be
// replayed for later steps.
struct AdamTensors {
  Tensor* weight;
  const Tensor* grad;
  Tensor* m;
  Tensor* v;
};
AdamDevice* create_adam_device();
void destroy_adam_device(AdamDevice* device) noexcept;
// Uploads the tensor table when it changed (blocking, so only on the first
// step or after the parameters moved) and writes this step's lr and
// corrections on the context's stream.
void adam_prepare(Context& ctx, AdamDevice& device, const std::vector<AdamTensors>& tensors, double learning_rate,
                  double correction1, double correction2);
// Enqueues the update of every tensor of the last adam_prepare.
void adam_apply(Context& ctx, AdamDevice& device, double beta1, double beta2, double epsilon);

}  // namespace plexus::cuda

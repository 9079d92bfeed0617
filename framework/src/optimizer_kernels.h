#pragma once
// The CUDA halves of the optimiser updates (framework/src/cuda/optimizer.cu;
// stubs in optimizer_cpu_only.cpp when built without CUDA). Every tensor has
// the same shape, dtype and device; the caller checks.
#include "plexus/context.h"
#include "plexus/tensor.h"

namespace plexus::cuda {

// velocity = momentum * velocity + grad;  weight -= learning_rate * velocity
void sgd_update(Context& ctx, Tensor& weight, const Tensor& grad, Tensor& velocity, double learning_rate,
                double momentum);

// m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2;
// weight -= learning_rate * (m / correction1) / (sqrt(v / correction2) + epsilon),
// with correction1 = 1 - beta1^t and correction2 = 1 - beta2^t.
void adam_update(Context& ctx, Tensor& weight, const Tensor& grad, Tensor& m, Tensor& v, double learning_rate,
                 double beta1, double beta2, double epsilon, double correction1, double correction2);

}  // namespace plexus::cuda

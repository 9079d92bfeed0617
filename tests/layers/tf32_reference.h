#pragma once
// A layer's TF32 CUDA passes against its f64 CPU kernels, for the tensor-core
// convolution tests (conv2d_test.cpp, conv_transpose2d_test.cpp).
//
// Both sides get the same parameters and fresh random inputs and output
// gradient. On CUDA the output and the input gradient are poisoned with NaN
// first and every parameter gradient starts from random values, so an element
// that is not written (or a gradient that overwrites instead of accumulating)
// turns the error into NaN or O(1). Errors are ||actual - ref|| / ||ref||; NaN
// anywhere gives NaN, which fails any `error < tolerance` assertion.
#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "plexus/context.h"
#include "plexus/layer.h"
#include "plexus/registry.h"

namespace plexus::testing {

struct Tf32Errors {
  double output = 0.0;
  double input_grad = 0.0;
  std::map<std::string, double> parameter_grads;
};

inline double relative_error(const std::vector<double>& actual, const std::vector<double>& expected) {
  double difference = 0.0, reference = 0.0;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    difference += (actual[i] - expected[i]) * (actual[i] - expected[i]);
    reference += expected[i] * expected[i];
  }
  if (actual.size() != expected.size()) return std::numeric_limits<double>::quiet_NaN();
  return std::sqrt(difference) / std::max(std::sqrt(reference), 1e-300);
}

inline std::vector<double> uniform_values(std::size_t n, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  std::vector<double> values(n);
  for (auto& v : values) v = dist(rng);
  return values;
}

// One forward and one backward of `type` on `input_shape`, f64 on the CPU
// against f32 on CUDA with TF32 allowed.
inline Tf32Errors tf32_errors(const Registry& registry, const std::string& type, const nlohmann::json& params,
                              const Shape& input_shape, std::uint64_t seed) {
  const Device gpu = Device::cuda();
  std::mt19937_64 rng(seed);
  auto reference = registry.create(type, "reference", params);
  auto tested = registry.create(type, "tested", params);
  const Shape output_shape = reference->output_shapes({input_shape})[0];
  tested->output_shapes({input_shape});
  reference->create_parameters({input_shape});
  tested->create_parameters({input_shape});
  reference->initialize_parameters(DType::f64, Device::cpu(), rng);
  tested->initialize_parameters(DType::f32, gpu, rng);
  for (Parameter* p : reference->parameters())
    tested->parameter(p->name).value.copy_from(Tensor::from_values(p->value.to_values(), p->shape, DType::f32, gpu));

  const auto x = uniform_values(static_cast<std::size_t>(shape_numel(input_shape)), rng);
  const auto dy = uniform_values(static_cast<std::size_t>(shape_numel(output_shape)), rng);
  const double nan = std::numeric_limits<double>::quiet_NaN();

  // Reference: f64 on the CPU, gradients from zero.
  Context cpu_ctx;
  Tensor x64 = Tensor::from_values(x, input_shape, DType::f64);
  Tensor y64(output_shape, DType::f64), dy64 = Tensor::from_values(dy, output_shape, DType::f64);
  Tensor dx64(input_shape, DType::f64);
  for (Parameter* p : reference->parameters()) p->grad.fill_zero();
  reference->forward(cpu_ctx, {&x64}, {&y64});
  reference->backward(cpu_ctx, {&x64}, {&y64}, {&dy64}, {&dx64});

  // Tested: f32 with TF32 on CUDA, poisoned outputs, gradients from random values.
  Context ctx(gpu);
  ctx.set_allow_tf32(true);
  Tensor x32 = Tensor::from_values(x, input_shape, DType::f32, gpu);
  Tensor y32 = Tensor::from_values(std::vector<double>(dy.size(), nan), output_shape, DType::f32, gpu);
  Tensor dy32 = Tensor::from_values(dy, output_shape, DType::f32, gpu);
  Tensor dx32 = Tensor::from_values(std::vector<double>(x.size(), nan), input_shape, DType::f32, gpu);
  std::map<std::string, std::vector<double>> initial_grads;
  for (Parameter* p : tested->parameters()) {
    initial_grads[p->name] = uniform_values(static_cast<std::size_t>(shape_numel(p->shape)), rng);
    p->grad.copy_from(Tensor::from_values(initial_grads[p->name], p->shape, DType::f32, gpu));
  }
  tested->forward(ctx, {&x32}, {&y32});
  tested->backward(ctx, {&x32}, {&y32}, {&dy32}, {&dx32});
  ctx.synchronize();

  Tf32Errors errors;
  errors.output = relative_error(y32.to_values(), y64.to_values());
  errors.input_grad = relative_error(dx32.to_values(), dx64.to_values());
  for (Parameter* p : reference->parameters()) {
    std::vector<double> added = tested->parameter(p->name).grad.to_values();
    const std::vector<double>& initial = initial_grads[p->name];
    for (std::size_t i = 0; i < added.size(); ++i) added[i] -= initial[i];
    errors.parameter_grads[p->name] = relative_error(added, p->grad.to_values());
  }
  return errors;
}

}  // namespace plexus::testing

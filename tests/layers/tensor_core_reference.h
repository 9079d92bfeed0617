#pragma once
// A layer's CUDA passes at a tensor-core precision (tf32 or bf16) against its
// f64 CPU kernels, for the tensor-core convolution tests (conv2d_test.cpp,
// conv_transpose2d_test.cpp).
//
// Both sides get the same parameters and fresh random inputs and output
// gradient. On CUDA the output and the input gradient are poisoned with NaN
// first and every parameter gradient starts from random values, so an element
// that is not written (or a gradient that overwrites instead of accumulating)
// turns the error into NaN or O(1). Errors are ||actual - ref|| / ||ref||; NaN
// anywhere gives NaN, which fails any `error < tolerance` assertion.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "plexus/context.h"
#include "plexus/layer.h"
#include "plexus/registry.h"

namespace plexus::testing {

// Tolerances on those norm-relative errors. Both leave room for the rounding
// of the operands and still fail on any wrong index or unwritten element
// (O(1) or NaN).
// TF32 keeps 10 mantissa bits, truncated: ~1e-3 relative per product at worst.
inline constexpr double kTf32Tolerance = 2e-3;
// BF16 keeps 7 (8 significant bits), rounded to nearest: each operand is off
// by at most 2^-8 = 3.9e-3 relative, 1e-3 to 2e-3 RMS, so a product by ~2e-3
// RMS (4x TF32's, whose truncation error is 3e-4 to 6e-4 RMS per operand).
// Summed over K terms of random sign the errors add like the terms
// themselves, so the output's norm-relative error stays near that RMS for
// any K; 1e-2 is several times above it.
inline constexpr double kBf16Tolerance = 1e-2;

struct TensorCoreErrors {
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
// against f32 on CUDA with the context's precision set to `precision`.
inline TensorCoreErrors tensor_core_errors(const Registry& registry, const std::string& type,
                                           const nlohmann::json& params, const Shape& input_shape, std::uint64_t seed,
                                           Precision precision) {
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

  // Tested: f32 at `precision` on CUDA, poisoned outputs, gradients from random values.
  Context ctx(gpu);
  ctx.set_precision(precision);
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

  TensorCoreErrors errors;
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

// "forward E, input gradient E, weight gradient E, ...", for the logs.
inline std::string describe(const TensorCoreErrors& errors) {
  std::ostringstream text;
  text << "forward " << errors.output << ", input gradient " << errors.input_grad;
  for (const auto& [name, error] : errors.parameter_grads) text << ", " << name << " gradient " << error;
  return text.str();
}

// Expects the output, the input gradient and every parameter gradient within
// `tolerance` of the f64 reference; `what` names the case.
inline void expect_within(const TensorCoreErrors& errors, double tolerance, const std::string& what) {
  EXPECT_LT(errors.output, tolerance) << "forward, " << what;
  EXPECT_LT(errors.input_grad, tolerance) << "input gradient, " << what;
  for (const auto& [name, error] : errors.parameter_grads) EXPECT_LT(error, tolerance) << name << " gradient, " << what;
}

// Expects the output, the input gradient and the weight gradient to show
// bf16 rounding: under TF32 each is ~4x more accurate (3 more mantissa bits,
// truncated instead of rounded), so a bf16 error that is not clearly larger
// means a pass ran without BF16 products. That holds for every pass, whether
// the implicit-GEMM engine or the im2col + cuBLAS path runs it (cuda::gemm
// runs BF16 products under bf16). The bias gradient is a sum, not a product.
inline void expect_bf16_rounding_shows(const TensorCoreErrors& bf16, const TensorCoreErrors& tf32,
                                       const std::string& what) {
  EXPECT_GT(bf16.output, 1.5 * tf32.output) << "forward at bf16 against tf32, " << what;
  EXPECT_GT(bf16.input_grad, 1.5 * tf32.input_grad) << "input gradient at bf16 against tf32, " << what;
  EXPECT_GT(bf16.parameter_grads.at("weight"), 1.5 * tf32.parameter_grads.at("weight"))
      << "weight gradient at bf16 against tf32, " << what;
}

}  // namespace plexus::testing

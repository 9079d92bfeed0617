#pragma once
// Small helpers shared by the layer tests: the errors a call throws (the
// graph-layer tests: add, mul, concat, split, sigmoid, leaky_relu,
// pixel_shuffle), and what the bf16 storage tests share
// (bf16_storage_test.cpp, avg_pool2d_test.cpp, window_test.cpp): inputs whose values are bf16
// numbers, so that f32 and bf16 tensors hold the same values, and the check
// that a stored result is the f32 pass's, rounded to bf16 (nearest even)
// where it is stored in bf16.
#include <gtest/gtest.h>

#include <cstddef>
#include <random>
#include <string>
#include <vector>

#include "plexus/bfloat16.h"
#include "plexus/error.h"
#include "plexus/layer.h"
#include "plexus/tensor.h"

namespace plexus::testing {

// The message of the ShapeError `fn` throws, or a note that it threw none.
template <typename Fn>
std::string shape_error_of(Fn&& fn) {
  try {
    fn();
  } catch (const ShapeError& e) {
    return e.what();
  }
  return "(no ShapeError thrown)";
}

// The message of the ConfigError `fn` throws, or a note that it threw none.
template <typename Fn>
std::string config_error_of(Fn&& fn) {
  try {
    fn();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no ConfigError thrown)";
}

inline bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// The nearest bf16 of `value` as an f32, by the library's scalar conversion.
inline double rounded_to_bf16(double value) {
  return f32_from_bf16_bits(bf16_bits_from_f32(static_cast<float>(value)));
}

// `count` values uniform in [low, high), each rounded to bf16.
inline std::vector<double> bf16_values(std::size_t count, double low, double high, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> uniform(low, high);
  std::vector<double> values(count);
  for (double& value : values) value = rounded_to_bf16(uniform(rng));
  return values;
}

// Expects `actual`, stored in `dtype`, to be `reference` (the all-f32
// pass's) exactly, rounded to bf16 when dtype is bf16.
inline void expect_stored(const std::vector<double>& reference, const std::vector<double>& actual, DType dtype,
                          const std::string& what) {
  ASSERT_EQ(reference.size(), actual.size()) << what;
  const auto expected = [&](std::size_t i) {
    return dtype == DType::bf16 ? rounded_to_bf16(reference[i]) : reference[i];
  };
  std::size_t wrong = 0, first_wrong = 0;
  for (std::size_t i = 0; i < reference.size(); ++i)
    if (!(actual[i] == expected(i)) && wrong++ == 0) first_wrong = i;
  EXPECT_EQ(wrong, 0u) << what << ": " << wrong << " of " << reference.size() << " elements differ; first ["
                       << first_wrong << "] " << actual[first_wrong] << " instead of " << expected(first_wrong);
}

// Expects `layer` (node `name`, shapes and parameters made for `shape`) to
// refuse a bf16 input on the CPU, whose kernels take f32 or f64 only, with a
// ConfigError that names the node, bf16 and the input.
inline void expect_cpu_refuses_bf16_input(Layer& layer, const std::string& name, const Shape& shape) {
  EXPECT_FALSE(layer.traits(Device::cpu()).takes_bf16());
  Context ctx(Device::cpu());
  Tensor input(shape, DType::bf16, Device::cpu());
  input.fill_zero();
  Tensor output(layer.output_shapes({shape})[0], DType::f32, Device::cpu());
  try {
    layer.forward(ctx, {&input}, {&output});
    ADD_FAILURE() << "a bf16 input was accepted on the CPU";
  } catch (const ConfigError& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("'" + name + "'"), std::string::npos) << message;
    EXPECT_NE(message.find("bf16"), std::string::npos) << message;
    EXPECT_NE(message.find("input 0"), std::string::npos) << message;
  }
}

}  // namespace plexus::testing

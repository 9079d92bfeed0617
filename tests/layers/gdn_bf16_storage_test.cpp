// GDN and IGDN with bf16 activation storage (LayerTraits::stores_bf16): storing in
// bf16 changes nothing but the rounding of the stored tensors. With inputs
// whose values are bf16 numbers, a pass on bf16 tensors must give exactly
// the f32 pass's output and input gradient rounded to bf16 (nearest even),
// and bit for bit its parameter gradients (f32): on CUDA the same kernels
// run on the same f32 values, whether they read bf16 themselves (tensor-core
// kernels, BF16 products, C <= 192, each side's dtype on its own) or
// through f32 stand-ins (the rest). The one exception: calls with every
// tensor bf16 and a multiple of 8 pixels per image run the bf16-tile
// kernels, with the same products but their own split of the sums, so there
// the output and input gradient may differ by one bf16 unit in the last
// place (on Hopper they are the same bits) and the parameter gradients by
// the order of their f32 additions.
// On the CPU a bf16 tensor is refused by name.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "layers/bf16_storage_test_support.h"
#include "plexus/bfloat16.h"
#include "plexus/builtin_layers.h"
#include "plexus/error.h"
#include "plexus/testing/gtest_helpers.h"

namespace plexus {
namespace {

using testing::bf16_values;
using testing::expect_stored;

const Registry registry = builtin_registry();

struct Pass {
  std::vector<double> y, dx, beta_grad, gamma_grad;
};

// One forward and backward on CUDA with f32 parameters; x and dx stored in
// input_dtype, y and dy in output_dtype (f32 or bf16). y and dx start as NaN.
Pass run_pass(const std::string& type, const Shape& shape, Precision precision, DType input_dtype, DType output_dtype,
              const std::vector<double>& beta, const std::vector<double>& gamma, const std::vector<double>& x,
              const std::vector<double>& dy) {
  const Device device = Device::cuda();
  const std::int64_t channels = shape[1];
  auto layer = registry.create(type, "g", {});
  layer->output_shapes({shape});
  layer->create_parameters({shape});
  std::mt19937_64 unused(0);
  layer->initialize_parameters(DType::f32, device, unused);
  layer->parameter("beta").value = Tensor::from_values(beta, {channels}, DType::f32, device);
  layer->parameter("gamma").value = Tensor::from_values(gamma, {channels, channels}, DType::f32, device);
  Context ctx(device);
  ctx.set_precision(precision);
  const std::vector<double> poison(x.size(), std::nan(""));
  Tensor input = Tensor::from_values(x, shape, input_dtype, device);
  Tensor output = Tensor::from_values(poison, shape, output_dtype, device);
  Tensor output_grad = Tensor::from_values(dy, shape, output_dtype, device);
  Tensor input_grad = Tensor::from_values(poison, shape, input_dtype, device);
  layer->forward(ctx, {&input}, {&output});
  layer->backward(ctx, {&input}, {&output}, {&output_grad}, {&input_grad});
  return {output.to_values(), input_grad.to_values(), layer->parameter("beta").grad.to_values(),
          layer->parameter("gamma").grad.to_values()};
}

// Expects sums over pixels (dbeta, dgamma) to be the reference's up to the
// order of f32 additions: within 1e-5 of the largest reference magnitude
// (f32 reordering moves them by about 1e-7 of it).
void expect_same_sums(const std::vector<double>& reference, const std::vector<double>& actual,
                      const std::string& what) {
  ASSERT_EQ(reference.size(), actual.size()) << what;
  double largest = 0.0;
  for (double value : reference) largest = std::max(largest, std::abs(value));
  const double tolerance = 1e-5 * largest;
  std::size_t wrong = 0, first_wrong = 0;
  for (std::size_t i = 0; i < reference.size(); ++i)
    if (!(std::abs(actual[i] - reference[i]) <= tolerance) && wrong++ == 0) first_wrong = i;
  EXPECT_EQ(wrong, 0u) << what << ": " << wrong << " of " << reference.size() << " elements differ by more than "
                       << tolerance << "; first [" << first_wrong << "] " << actual[first_wrong] << " instead of "
                       << reference[first_wrong];
}

// Expects `actual` (bf16 values) to be `reference` rounded to bf16, or
// the bf16 next to it on either side.
void expect_stored_within_one_unit(const std::vector<double>& reference, const std::vector<double>& actual,
                                   const std::string& what) {
  ASSERT_EQ(reference.size(), actual.size()) << what;
  std::size_t wrong = 0, first_wrong = 0;
  for (std::size_t i = 0; i < reference.size(); ++i) {
    const double expected = testing::rounded_to_bf16(reference[i]);
    const float magnitude = static_cast<float>(std::abs(expected));
    const double unit = f32_from_bf16_bits(static_cast<std::uint16_t>(bf16_bits_from_f32(magnitude) + 1)) - magnitude;
    if (!(std::abs(actual[i] - expected) <= unit) && wrong++ == 0) first_wrong = i;
  }
  EXPECT_EQ(wrong, 0u) << what << ": " << wrong << " of " << reference.size()
                       << " elements are more than one bf16 unit from the rounded reference; first [" << first_wrong
                       << "] " << actual[first_wrong] << " instead of "
                       << testing::rounded_to_bf16(reference[first_wrong]);
}

// Whether a call runs the bf16-tile kernels: every tensor bf16, BF16
// products, C <= 192, a multiple of 8 pixels per image.
bool runs_bf16_tiles(const Shape& shape, Precision precision, DType input_dtype, DType output_dtype) {
  std::int64_t pixels = 1;
  for (std::size_t axis = 2; axis < shape.size(); ++axis) pixels *= shape[axis];
  return precision == Precision::bf16 && input_dtype == DType::bf16 && output_dtype == DType::bf16 && shape[1] <= 192 &&
         pixels % 8 == 0;
}

void check_storage(const std::string& type, const Shape& shape, Precision precision, DType input_dtype,
                   DType output_dtype, std::mt19937_64& rng) {
  SCOPED_TRACE(type + " " + shape_str(shape) + " " + precision_name(precision) + ", x " + dtype_name(input_dtype) +
               ", y " + dtype_name(output_dtype));
  const auto c = static_cast<std::size_t>(shape[1]);
  const std::vector<double> beta = bf16_values(c, 0.7, 1.3, rng);
  const std::vector<double> gamma = bf16_values(c * c, 0.1, 0.6, rng);
  const std::vector<double> x = bf16_values(static_cast<std::size_t>(shape_numel(shape)), -1.0, 1.0, rng);
  const std::vector<double> dy = bf16_values(x.size(), -1.0, 1.0, rng);
  const Pass reference = run_pass(type, shape, precision, DType::f32, DType::f32, beta, gamma, x, dy);
  const Pass stored = run_pass(type, shape, precision, input_dtype, output_dtype, beta, gamma, x, dy);
  if (runs_bf16_tiles(shape, precision, input_dtype, output_dtype)) {
    expect_stored_within_one_unit(reference.y, stored.y, "y");
    expect_stored_within_one_unit(reference.dx, stored.dx, "dx");
    expect_same_sums(reference.beta_grad, stored.beta_grad, "dbeta");
    expect_same_sums(reference.gamma_grad, stored.gamma_grad, "dgamma");
    return;
  }
  expect_stored(reference.y, stored.y, output_dtype, "y");
  expect_stored(reference.dx, stored.dx, input_dtype, "dx");
  expect_stored(reference.beta_grad, stored.beta_grad, DType::f32, "dbeta");
  expect_stored(reference.gamma_grad, stored.gamma_grad, DType::f32, "dgamma");
}

// BF16 products: the tensor-core kernels read and write bf16 (C padded to
// 32, 64, 128, 192), stand-ins at C = 256. 96 pixels per image (bf16 tiles:
// tiles straddle images, the last one is partial), 32 in one image (bf16
// tiles: one partial tile) and 99 (f32 tiles, scalar access).
TEST(GDNBf16Storage, Bf16ProductsGiveTheF32ResultsRoundedCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  std::mt19937_64 rng(71);
  for (const std::string type : {"GDN", "IGDN"})
    for (std::int64_t channels : {3, 64, 128, 192, 256})
      for (const Shape& shape : {Shape{3, channels, 8, 12}, Shape{1, channels, 4, 8}, Shape{2, channels, 9, 11}})
        check_storage(type, shape, Precision::bf16, DType::bf16, DType::bf16, rng);
}

TEST(GDNBf16Storage, MixedStorageGivesTheF32ResultsRoundedCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  std::mt19937_64 rng(72);
  // The tensor-core kernels with one side bf16 (C = 64: two buffers; C = 192: one), and stand-ins at C = 256.
  for (const std::string type : {"GDN", "IGDN"})
    for (std::int64_t channels : {64, 192, 256}) {
      check_storage(type, {2, channels, 8, 12}, Precision::bf16, DType::bf16, DType::f32, rng);
      check_storage(type, {2, channels, 9, 11}, Precision::bf16, DType::f32, DType::bf16, rng);
    }
}

// TF32 products and strict f32 have no bf16 kernels: f32 stand-ins, the same guarantee.
TEST(GDNBf16Storage, OtherPrecisionsGiveTheF32ResultsRoundedCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  std::mt19937_64 rng(73);
  for (const Precision precision : {Precision::tf32, Precision::f32})
    for (std::int64_t channels : {64, 256})
      check_storage("GDN", {2, channels, 8, 12}, precision, DType::bf16, DType::bf16, rng);
}

TEST(GDNBf16Storage, RefusedOnTheCpuByName) {
  auto layer = registry.create("GDN", "g", {});
  const Shape shape{1, 4, 2, 2};
  layer->output_shapes({shape});
  layer->create_parameters({shape});
  std::mt19937_64 rng(0);
  layer->initialize_parameters(DType::f32, Device::cpu(), rng);
  EXPECT_FALSE(layer->traits(Device::cpu()).stores_bf16);
  EXPECT_TRUE(layer->traits(Device::cuda()).stores_bf16);
  testing::expect_cpu_refuses_bf16_input(*layer, "g", shape);
}

}  // namespace
}  // namespace plexus

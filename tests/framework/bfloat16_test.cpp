// bf16: conversions against hand-worked bit patterns and against a
// reference rounding in double, every bf16 value round-tripping, and bf16
// tensors (storage, values, views, device copies, and the places that
// refuse them by name).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "plexus/bfloat16.h"
#include "plexus/builtin_layers.h"
#include "plexus/layer.h"
#include "plexus/net.h"
#include "plexus/tensor.h"
#include "plexus/tensor_ops.h"
#include "plexus/testing/gtest_helpers.h"

namespace plexus {
namespace {

float from_bits(std::uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

// f32 bit pattern -> expected bf16 bits, worked by hand: keep the upper 16
// bits, add one when the dropped lower 16 are above 0x8000, or are 0x8000
// and the kept part is odd.
TEST(BFloat16, RoundsToNearestTiesToEvenOnWorkedExamples) {
  const struct {
    std::uint32_t f32;
    std::uint16_t bf16;
    const char* what;
  } cases[] = {
      {0x3f800000u, 0x3f80, "1"},
      {0xc0200000u, 0xc020, "-2.5"},
      {0x00000000u, 0x0000, "+0"},
      {0x80000000u, 0x8000, "-0"},
      {0x40490fdbu, 0x4049, "pi (dropped 0x0fdb: down, 3.140625)"},
      {0x3f808000u, 0x3f80, "1 + 2^-8: a tie, the kept part even: down"},
      {0x3f818000u, 0x3f82, "1 + 3 2^-8: a tie, the kept part odd: up"},
      {0x3f808001u, 0x3f81, "just above a tie: up"},
      {0x3f807fffu, 0x3f80, "just below a tie: down"},
      {0xbf818000u, 0xbf82, "a negative tie, odd: up in magnitude"},
      {0x3fffffffu, 0x4000, "a carry into the exponent"},
      {0x7f7f7fffu, 0x7f7f, "below the overflow threshold: the largest finite bf16"},
      {0x7f7f8000u, 0x7f80, "the overflow threshold (a tie, odd): infinity"},
      {0x7f7fffffu, 0x7f80, "the largest f32: infinity"},
      {0x7f800000u, 0x7f80, "+infinity"},
      {0xff800000u, 0xff80, "-infinity"},
      {0x00000001u, 0x0000, "the smallest f32 subnormal: below half of bf16's"},
      {0x00008000u, 0x0000, "half of bf16's smallest subnormal, even: 0"},
      {0x00018000u, 0x0002, "a subnormal tie, odd: up"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    EXPECT_EQ(bf16_bits_from_f32(from_bits(c.f32)), c.bf16);
  }
}

TEST(BFloat16, NaNStaysANaNOfTheSameSign) {
  for (const std::uint32_t nan : {0x7fc00000u, 0x7f800001u, 0xff800001u, 0x7fbfffffu}) {
    SCOPED_TRACE(nan);
    const std::uint16_t bits = bf16_bits_from_f32(from_bits(nan));
    EXPECT_TRUE(std::isnan(f32_from_bf16_bits(bits)));  // 0x7f800001 must not become infinity
    EXPECT_EQ(bits & 0x8000u, (nan >> 16) & 0x8000u);
  }
}

TEST(BFloat16, EveryBf16ValueWidensExactlyAndNarrowsBackToItself) {
  for (std::uint32_t b = 0; b <= 0xffffu; ++b) {
    const float wide = f32_from_bf16_bits(static_cast<std::uint16_t>(b));
    std::uint32_t wide_bits;
    std::memcpy(&wide_bits, &wide, sizeof wide_bits);
    ASSERT_EQ(wide_bits, b << 16) << b;
    if (std::isnan(wide)) continue;
    ASSERT_EQ(bf16_bits_from_f32(wide), b) << b;
  }
}

// Against a reference: the two bf16 values around x (truncated, and one
// unit further from zero), the distances computed exactly in double, a tie
// going to the even one. Finite f32 below the largest binade (overflow is
// covered above).
TEST(BFloat16, MatchesNearestEvenReferenceOnRandomF32) {
  std::mt19937 rng(1234);
  std::uniform_int_distribution<std::uint32_t> any;
  for (int i = 0; i < 200000; ++i) {
    std::uint32_t bits = any(rng);
    if ((bits & 0x7f800000u) >= 0x7f000000u) continue;
    if (i % 4 == 0) bits = (bits & 0xffff0000u) | 0x8000u;  // make ties common
    const double x = from_bits(bits);
    const std::uint32_t below = bits & 0xffff0000u, above = below + 0x10000u;
    const double low = from_bits(below), high = from_bits(above);
    const double to_low = std::fabs(x - low), to_high = std::fabs(high - x);
    std::uint32_t expected = to_low < to_high ? below : to_high < to_low ? above : ((below >> 16) & 1u ? above : below);
    ASSERT_EQ(bf16_bits_from_f32(static_cast<float>(x)), expected >> 16) << std::hex << bits;
  }
}

TEST(BFloat16, TensorsStoreTwoBytesPerValueAndRoundOnTheWayIn) {
  EXPECT_EQ(dtype_size(DType::bf16), 2u);
  EXPECT_STREQ(dtype_name(DType::bf16), "bf16");
  const Tensor t = Tensor::from_values({1.0, 3.14159265358979, -2.5, 1.0 + 1.0 / 256}, {2, 2}, DType::bf16);
  EXPECT_EQ(t.nbytes(), 8u);
  EXPECT_EQ(t.to_values(), (std::vector<double>{1.0, 3.140625, -2.5, 1.0}));
  EXPECT_EQ(t.to(DType::f32).to_values(), t.to_values());
  EXPECT_EQ(t.to(DType::f32).dtype(), DType::f32);
  const Tensor narrowed = Tensor::from_values({0.1, 1.0 + 3.0 / 256}, {2}, DType::f32).to(DType::bf16);
  EXPECT_EQ(narrowed.dtype(), DType::bf16);
  // 0.1f = 0x3dcccccd: dropped 0xcccd, above half: 0x3dcd = 0.10009765625.
  EXPECT_EQ(narrowed.to_values(), (std::vector<double>{0.10009765625, 1.015625}));
  EXPECT_EQ(t.elements_view(1, {2}).to_values(), (std::vector<double>{3.140625, -2.5}));
  Tensor copy({2, 2}, DType::bf16);
  copy.copy_from(t);
  EXPECT_EQ(copy.to_values(), t.to_values());
}

TEST(BFloat16, ComputationsRefuseBf16TensorsByName) {
  Tensor t({4}, DType::bf16);
  try {
    t.data<float>();
    FAIL() << "read as f32";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bf16"), std::string::npos) << e.what();
  }
  EXPECT_THROW(dispatch_float(DType::bf16, [](auto) { return 0; }), ConfigError);
  ModelSpec spec;
  spec.name = "tiny";
  spec.add_input("x").add_node({"relu", "ReLU", {"x"}, {"y"}, {}});
  try {
    Net net(spec, builtin_registry(), {{"x", {2, 3}}}, DType::bf16, Device::cpu(), 1);
    FAIL() << "a bf16 net was built";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("bf16"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("tiny"), std::string::npos) << e.what();
  }
}

TEST(BFloat16, TensorsKeepTheirBitsOnTheGpuCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  const Tensor host = Tensor::from_values({1.0, -0.0, 3.14159265358979, 1e-40, 65504.0}, {5}, DType::bf16);
  const Tensor device = host.to(Device::cuda());
  EXPECT_EQ(device.dtype(), DType::bf16);
  EXPECT_EQ(device.nbytes(), 10u);
  const Tensor back = device.to(Device::cpu());
  EXPECT_EQ(std::memcmp(back.raw_data(), host.raw_data(), host.nbytes()), 0);
  Tensor zeros({5}, DType::bf16, Device::cuda());
  zeros.copy_from(device);
  zeros.fill_zero();
  EXPECT_EQ(zeros.to_values(), (std::vector<double>(5, 0.0)));
}

// Random finite f32 (every binade, the largest ones included, so some
// round to infinity), a quarter of them bf16 ties.
std::vector<double> random_f32_values(std::size_t count) {
  std::mt19937 rng(99);
  std::uniform_int_distribution<std::uint32_t> any;
  std::vector<double> values;
  while (values.size() < count) {
    std::uint32_t bits = any(rng);
    if ((bits & 0x7f800000u) == 0x7f800000u) continue;
    if (values.size() % 4 == 0) bits = (bits & 0xffff0000u) | 0x8000u;
    values.push_back(from_bits(bits));
  }
  return values;
}

std::vector<std::uint16_t> bf16_bits_of(const Tensor& tensor) {
  const Tensor host = tensor.to(Device::cpu());
  std::vector<std::uint16_t> bits(static_cast<std::size_t>(host.numel()));
  std::memcpy(bits.data(), host.raw_data(), host.nbytes());
  return bits;
}

TEST(BFloat16, ConvertNarrowsAndWidensLikeTheScalarConversions) {
  Context ctx;
  const std::vector<double> values = random_f32_values(4096);
  const Shape shape{64, 64};
  const Tensor f32 = Tensor::from_values(values, shape, DType::f32);
  Tensor bf16(shape, DType::bf16), back(shape, DType::f32), f64(shape, DType::f64), f64_back(shape, DType::f32);
  convert(ctx, bf16, f32);
  const std::vector<std::uint16_t> bits = bf16_bits_of(bf16);
  for (std::size_t i = 0; i < values.size(); ++i)
    ASSERT_EQ(bits[i], bf16_bits_from_f32(static_cast<float>(values[i]))) << "element " << i;
  convert(ctx, back, bf16);
  const std::vector<double> widened = back.to_values();
  for (std::size_t i = 0; i < values.size(); ++i) ASSERT_EQ(widened[i], f32_from_bf16_bits(bits[i])) << i;
  convert(ctx, f64, f32);
  EXPECT_EQ(f64.to_values(), values);  // f32 values are exact in f64
  convert(ctx, f64_back, f64);
  EXPECT_EQ(f64_back.to_values(), values);
  Tensor wrong({4096}, DType::bf16);
  EXPECT_THROW(convert(ctx, wrong, f32), ShapeError);
}

TEST(BFloat16, ConvertOnTheGpuGivesTheCpuBitsCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  Context cpu, gpu(Device::cuda());
  const std::vector<double> values = random_f32_values(1 << 16);
  const Shape shape{256, 256};
  for (const DType source_dtype : {DType::f32, DType::f64}) {
    SCOPED_TRACE(dtype_name(source_dtype));
    const Tensor source = Tensor::from_values(values, shape, source_dtype);
    Tensor on_cpu(shape, DType::bf16), on_gpu(shape, DType::bf16, Device::cuda());
    convert(cpu, on_cpu, source);
    convert(gpu, on_gpu, source.to(Device::cuda()));
    gpu.synchronize();
    EXPECT_EQ(bf16_bits_of(on_gpu), bf16_bits_of(on_cpu));
    Tensor widened_gpu(shape, source_dtype, Device::cuda()), widened_cpu(shape, source_dtype);
    convert(gpu, widened_gpu, on_gpu);
    convert(cpu, widened_cpu, on_cpu);
    gpu.synchronize();
    EXPECT_EQ(widened_gpu.to_values(), widened_cpu.to_values());
  }
}

}  // namespace
}  // namespace plexus

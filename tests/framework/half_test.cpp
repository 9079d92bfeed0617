// f16 storage (plexus/half.h, safetensors "F16"): every f16 converts to f32
// and back unchanged; f32 values round to the nearest f16, ties to even,
// checked against a brute-force search over all f16 values decoded here
// from the IEEE layout; files written with F16 weights say so in their
// header, read back exactly, and refuse values f16 cannot hold.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include "data/data_test_support.h"
#include "plexus/checkpoint.h"
#include "plexus/error.h"
#include "plexus/half.h"

namespace plexus {
namespace {

using testing::ScratchFolder;

// The value of f16 bit pattern `bits`, from the IEEE 754 binary16 layout, in
// f64: (-1)^s 2^(e - 15) (1 + m / 1024), or 2^-14 (m / 1024) when e = 0.
double f16_value(std::uint16_t bits) {
  const int sign = bits >> 15, exponent = (bits >> 10) & 31, mantissa = bits & 1023;
  double magnitude =
      exponent == 0 ? std::ldexp(mantissa / 1024.0, -14) : std::ldexp(1.0 + mantissa / 1024.0, exponent - 15);
  if (exponent == 31) magnitude = mantissa == 0 ? INFINITY : NAN;
  return sign ? -magnitude : magnitude;
}

TEST(Half, EveryF16ValueConvertsExactlyAndBack) {
  for (std::uint32_t bits = 0; bits < 65536; ++bits) {
    const std::uint16_t half = static_cast<std::uint16_t>(bits);
    const double expected = f16_value(half);
    const float value = f32_from_f16_bits(half);
    if (std::isnan(expected)) {
      EXPECT_TRUE(std::isnan(value)) << bits;
      EXPECT_TRUE(std::isnan(f32_from_f16_bits(f16_bits_from_f32(value)))) << bits;
      continue;
    }
    ASSERT_EQ(static_cast<double>(value), expected) << "bits " << bits;
    ASSERT_EQ(f16_bits_from_f32(value), half) << "bits " << bits;
  }
}

// The nearest finite f16 by exhaustive search; a tie goes to the even
// mantissa; beyond 65504 + half a step (65520) it is infinity.
double nearest_f16(double x) {
  if (std::abs(x) >= 65520.0) return x > 0 ? INFINITY : -INFINITY;
  double best = 0;
  std::uint16_t best_bits = 0;
  for (std::uint32_t bits = 0; bits < 0x7c00; ++bits) {  // the non-negative finite ones
    const double candidate = f16_value(static_cast<std::uint16_t>(bits));
    const double d = std::abs(candidate - std::abs(x)), d_best = std::abs(best - std::abs(x));
    if (d < d_best || (d == d_best && (bits & 1) == 0 && (best_bits & 1) == 1)) {
      best = candidate;
      best_bits = static_cast<std::uint16_t>(bits);
    }
  }
  return x < 0 ? -best : best;
}

TEST(Half, F32RoundsToTheNearestF16TiesToEven) {
  // Hand-picked: exact ties between neighbours 2^-10 apart near 1 go to the even mantissa.
  EXPECT_EQ(f32_from_f16_bits(f16_bits_from_f32(1.0f + std::ldexp(1.0f, -11))), 1.0f);
  EXPECT_EQ(f32_from_f16_bits(f16_bits_from_f32(1.0f + 3 * std::ldexp(1.0f, -11))), 1.0f + std::ldexp(1.0f, -9));
  EXPECT_EQ(f32_from_f16_bits(f16_bits_from_f32(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20))),
            1.0f + std::ldexp(1.0f, -10));
  EXPECT_EQ(f32_from_f16_bits(f16_bits_from_f32(0.1f)), 0.0999755859375f);  // numpy.float16(0.1)
  EXPECT_EQ(f32_from_f16_bits(f16_bits_from_f32(65519.0f)), 65504.0f);
  EXPECT_TRUE(std::isinf(f32_from_f16_bits(f16_bits_from_f32(65520.0f))));
  EXPECT_EQ(f32_from_f16_bits(f16_bits_from_f32(std::ldexp(1.0f, -25))), 0.0f);  // a tie with 0: even
  EXPECT_EQ(f32_from_f16_bits(f16_bits_from_f32(std::ldexp(3.0f, -26))), std::ldexp(1.0f, -24));
  EXPECT_EQ(f16_bits_from_f32(-0.0f), 0x8000);

  // Random values over the whole range, and the exact midpoints between neighbours.
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<double> exponent(-26.0, 16.0);
  std::vector<float> values;
  for (int i = 0; i < 400; ++i) values.push_back(static_cast<float>((i % 2 ? -1 : 1) * std::exp2(exponent(rng))));
  for (std::uint16_t bits : {0x0001, 0x03ff, 0x0400, 0x3c00, 0x3c01, 0x5555, 0x7bfe})
    values.push_back(static_cast<float>((f16_value(bits) + f16_value(static_cast<std::uint16_t>(bits + 1))) / 2));
  for (float value : values) {
    const double expected = nearest_f16(value);
    EXPECT_EQ(static_cast<double>(f32_from_f16_bits(f16_bits_from_f32(value))), expected) << value;
  }
}

TEST(Half, SafetensorsF16RoundTripAndHeader) {
  ScratchFolder folder("half");
  const std::string path = folder / "weights.safetensors";
  TensorFile file;
  const std::vector<double> weights = {0.1, -2.5, 1e-6, 3.0e4, 1.0 + std::ldexp(1.0, -11), 0.0};
  file.tensors["layer.weight"] = Tensor::from_values(weights, {2, 3});
  file.tensors["table"] = Tensor::from_values({70000.0, 1.0 / 3.0}, {2});  // not stored as F16
  file.metadata["note"] = "kept";
  save_safetensors(path, file, {"layer.weight"});

  // The header: 8-byte length, then JSON naming the dtypes.
  std::ifstream in(path, std::ios::binary);
  unsigned char length_bytes[8];
  in.read(reinterpret_cast<char*>(length_bytes), 8);
  std::uint64_t length = 0;
  for (int i = 0; i < 8; ++i) length |= static_cast<std::uint64_t>(length_bytes[i]) << (8 * i);
  std::string header_text(length, '\0');
  in.read(header_text.data(), static_cast<std::streamsize>(length));
  const auto header = nlohmann::json::parse(header_text);
  EXPECT_EQ(header["layer.weight"]["dtype"], "F16");
  EXPECT_EQ(header["layer.weight"]["data_offsets"][1].get<int>() - header["layer.weight"]["data_offsets"][0].get<int>(),
            12);
  EXPECT_EQ(header["table"]["dtype"], "F32");

  const TensorFile loaded = load_safetensors(path);
  EXPECT_EQ(loaded.metadata.at("note"), "kept");
  const Tensor& w = loaded.tensors.at("layer.weight");
  EXPECT_EQ(w.dtype(), DType::f32);
  EXPECT_EQ(w.shape(), (Shape{2, 3}));
  const std::vector<double> values = w.to_values();
  for (std::size_t i = 0; i < weights.size(); ++i) EXPECT_EQ(values[i], nearest_f16(weights[i])) << i;
  EXPECT_EQ(loaded.tensors.at("table").to_values(), file.tensors["table"].to_values());

  // Written again as F16, the loaded (already f16) values come back bit for bit.
  TensorFile again;
  again.tensors["layer.weight"] = w;
  save_safetensors(folder / "again.safetensors", again, {"layer.weight"});
  EXPECT_EQ(load_safetensors(folder / "again.safetensors").tensors.at("layer.weight").to_values(), values);
}

TEST(Half, ValuesF16CannotHoldAreRefusedAndNothingIsWritten) {
  ScratchFolder folder("half-bad");
  const std::string path = folder / "bad.safetensors";
  TensorFile file;
  file.tensors["big"] = Tensor::from_values({1.0, 70000.0}, {2});
  try {
    save_safetensors(path, file, {"big"});
    FAIL() << "expected an IoError";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("tensor 'big' element 1 is 70000, which f16 storage cannot hold"),
              std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_THROW(save_safetensors(path, file, {"missing"}), IoError);
}

}  // namespace
}  // namespace plexus

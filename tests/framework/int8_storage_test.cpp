// int8 weight storage (plexus/int8.h, safetensors "I8" with an F32
// "<name>.int8_scale"): the scales, the rounding (half to even) and the
// loaded values worked out by hand, per channel along either axis; a file
// holds q and the scales as the format says and loads back bit for bit; every
// inconsistent file is refused naming the file and the tensor, and sizes too
// large to hold are refused before anything is allocated.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>

#include <nlohmann/json.hpp>

#include "data/data_test_support.h"
#include "plexus/testing/gtest_helpers.h"
#include "plexus/checkpoint.h"
#include "plexus/error.h"
#include "plexus/int8.h"

namespace plexus {
namespace {

using testing::error_of;
using testing::read_bytes;
using testing::ScratchFolder;
using testing::write_bytes;

// A safetensors file: the 8-byte header length, the header, the data.
std::string raw_file(const std::string& header, const std::string& data) {
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  return bytes + header + data;
}

std::string f32_bytes(const std::vector<float>& values) {
  std::string bytes(values.size() * sizeof(float), '\0');
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

std::vector<float> floats(const Tensor& tensor) {
  const float* values = tensor.data<float>();
  return std::vector<float>(values, values + tensor.numel());
}

// Rows of [3, 4] quantised per row (axis 0): row 0 has max |w| 127, so its
// scale is 1; row 1 has 63.5, scale 0.5; row 2 is all zeros, scale 0.
// Halves round to even: -3.5 -> -4, 2.5 -> 2, 1.25 / 0.5 = 2.5 -> 2, 0.75 / 0.5 = 1.5 -> 2.
TEST(Int8Storage, QuantisesEachOutputChannelAsWorkedOutByHand) {
  const Tensor w = Tensor::from_values({127, -3.5, 2.5, 0.4,   //
                                        -63.5, 1.25, 0.75, 0,  //
                                        0, 0, 0, 0},
                                       {3, 4}, DType::f32);
  const Int8Tensor stored = quantize_int8(w, 0, "w");
  EXPECT_EQ(stored.shape, (Shape{3, 4}));
  EXPECT_EQ(stored.scale.shape(), (Shape{3, 1}));
  EXPECT_EQ(floats(stored.scale), (std::vector<float>{1.0f, 0.5f, 0.0f}));
  EXPECT_EQ(stored.values, (std::vector<std::int8_t>{127, -4, 2, 0, -127, 2, 2, 0, 0, 0, 0, 0}));
  EXPECT_EQ(floats(dequantize_int8(stored)), (std::vector<float>{127, -4, 2, 0, -63.5f, 1, 1, 0, 0, 0, 0, 0}));
}

// The same numbers as columns: axis 1 of a [4, 3] tensor (a ConvTranspose2d's
// output channels are its weight's axis 1), and along axis 1 of a rank-4 one.
TEST(Int8Storage, QuantisesAlongAxisOne) {
  const Tensor w = Tensor::from_values({127, -63.5, 0,  //
                                        -3.5, 1.25, 0,  //
                                        2.5, 0.75, 0,   //
                                        0.4, 0, 0},
                                       {4, 3}, DType::f32);
  const Int8Tensor stored = quantize_int8(w, 1, "w");
  EXPECT_EQ(stored.scale.shape(), (Shape{1, 3}));
  EXPECT_EQ(floats(stored.scale), (std::vector<float>{1.0f, 0.5f, 0.0f}));
  EXPECT_EQ(stored.values, (std::vector<std::int8_t>{127, -127, 0, -4, 2, 0, 2, 2, 0, 0, 0, 0}));

  // [2, 3, 1, 2]: channel c of axis 1 holds the values 10 * c + (2, -1) in both of axis 0's slices,
  // and axis 0's second slice doubles them, so channel c's max is 2 * (10 * c + 2).
  std::vector<double> values;
  for (int i = 0; i < 2; ++i)
    for (int c = 0; c < 3; ++c)
      for (double v : {10.0 * c + 2, -(10.0 * c + 1)}) values.push_back(v * (i + 1));
  const Int8Tensor conv = quantize_int8(Tensor::from_values(values, {2, 3, 1, 2}, DType::f32), 1, "conv");
  EXPECT_EQ(conv.scale.shape(), (Shape{1, 3, 1, 1}));
  EXPECT_EQ(floats(conv.scale), (std::vector<float>{4.0f / 127, 24.0f / 127, 44.0f / 127}));
  EXPECT_EQ(conv.values[0], 64);     // 2 / (4 / 127) = 63.5 -> 64 (to even)
  EXPECT_EQ(conv.values[6], 127);    // channel 0's largest: 4
  EXPECT_EQ(conv.values[11], -121);  // -42 / (44 / 127) = -121.2 -> -121
  const std::vector<float> loaded = floats(dequantize_int8(conv));
  EXPECT_EQ(loaded[0], 64.0f * (4.0f / 127));  // one f32 multiply
  EXPECT_EQ(loaded[11], -121.0f * (44.0f / 127));
}

TEST(Int8Storage, RefusesWhatItCannotHold) {
  const Tensor nan = Tensor::from_values({1, std::nan("")}, {1, 2}, DType::f32);
  EXPECT_NE(error_of<Error>([&] { quantize_int8(nan, 0, "w"); }).find("tensor 'w' element 1 is nan"),
            std::string::npos);
  EXPECT_NE(error_of<Error>([&] { quantize_int8(nan, 2, "w"); }).find("has no axis 2"), std::string::npos);
  const Tensor huge = Tensor::from_values({std::numeric_limits<float>::max()}, {1, 1}, DType::f32);
  EXPECT_NE(error_of<Error>([&] { quantize_int8(huge, 0, "w"); }).find("too large for int8"), std::string::npos);
}

class Int8File : public ::testing::Test {
 protected:
  std::string path(const std::string& name) const { return folder / (name + ".safetensors"); }
  ScratchFolder folder{"int8-storage"};
};

TEST_F(Int8File, WritesQAndScalesAndLoadsThemBackExactly) {
  TensorFile file;
  const Tensor w = Tensor::from_values({127, -3.5, 2.5, 0.4, -63.5, 1.25, 0.75, 0}, {2, 4}, DType::f32);
  CompactStorage storage;
  storage.int8["w"] = quantize_int8(w, 0, "w");
  file.tensors["w"] = dequantize_int8(storage.int8["w"]);
  file.tensors["b"] = Tensor::from_values({0.1, 0.2}, {2}, DType::f32);
  save_safetensors(path("int8"), file, storage);

  const std::string bytes = read_bytes(path("int8"));
  std::uint64_t header_size = 0;
  for (int i = 0; i < 8; ++i)
    header_size |= static_cast<std::uint64_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
  const nlohmann::json header = nlohmann::json::parse(bytes.substr(8, header_size));
  EXPECT_EQ(header["w"]["dtype"], "I8");
  EXPECT_EQ(header["w"]["shape"], nlohmann::json::parse("[2, 4]"));
  EXPECT_EQ(header["w.int8_scale"]["dtype"], "F32");
  EXPECT_EQ(header["w.int8_scale"]["shape"], nlohmann::json::parse("[2, 1]"));
  EXPECT_EQ(header["b"]["dtype"], "F32");
  const std::string data = bytes.substr(8 + header_size);
  const std::uint64_t q_begin = header["w"]["data_offsets"][0], scale_begin = header["w.int8_scale"]["data_offsets"][0];
  std::int8_t q[8];
  std::memcpy(q, data.data() + q_begin, 8);
  EXPECT_EQ(std::vector<std::int8_t>(q, q + 8), (std::vector<std::int8_t>{127, -4, 2, 0, -127, 2, 2, 0}));
  float scale[2];
  std::memcpy(scale, data.data() + scale_begin, sizeof scale);
  EXPECT_EQ(scale[0], 1.0f);
  EXPECT_EQ(scale[1], 0.5f);

  const TensorFile loaded = load_safetensors(path("int8"));
  EXPECT_EQ(loaded.tensors.size(), 2u);  // the scale is folded into "w"
  EXPECT_EQ(loaded.tensors.at("w").dtype(), DType::f32);
  EXPECT_EQ(floats(loaded.tensors.at("w")), (std::vector<float>{127, -4, 2, 0, -63.5f, 1, 1, 0}));
  EXPECT_EQ(floats(loaded.tensors.at("b")), floats(file.tensors["b"]));
}

TEST_F(Int8File, WritingRefusesATensorThatIsNotItsInt8Form) {
  TensorFile file;
  const Tensor w = Tensor::from_values({1.0, 0.3}, {1, 2}, DType::f32);
  CompactStorage storage;
  storage.int8["w"] = quantize_int8(w, 0, "w");
  file.tensors["w"] = w;  // 0.3 is not 38 * (1 / 127)
  EXPECT_NE(error_of<IoError>([&] {
              save_safetensors(path("mismatch"), file, storage);
            }).find("tensor 'w' does not hold the f32 values its int8 form loads as"),
            std::string::npos);
  file.tensors["w"] = dequantize_int8(storage.int8["w"]);
  file.tensors["x.int8_scale"] = w;
  EXPECT_NE(error_of<IoError>([&] {
              save_safetensors(path("reserved"), file, storage);
            }).find("tensor 'x.int8_scale' has a name ending in '.int8_scale'"),
            std::string::npos);
  file.tensors.erase("x.int8_scale");
  storage.f16.insert("w");
  EXPECT_NE(error_of<IoError>([&] { save_safetensors(path("both"), file, storage); }).find("both F16 and I8"),
            std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(path("mismatch")));
}

// The header of a file with an I8 tensor "w" [2, 2] (q = 1, -2, 3, 127) at
// [0, 4] and, unless `scale_entry` is empty, the entry of "w.int8_scale" at
// [4, 4 + scale data size].
std::string int8_file(const std::string& scale_entry, const std::string& scale_data,
                      const std::string& q = std::string("\x01\xfe\x03\x7f", 4)) {
  std::string header = R"({"w": {"dtype": "I8", "shape": [2, 2], "data_offsets": [0, 4]})";
  if (!scale_entry.empty())
    header += R"(, "w.int8_scale": {)" + scale_entry + R"(, "data_offsets": [4, )" +
              std::to_string(4 + scale_data.size()) + "]}";
  return raw_file(header + "}", q + scale_data);
}

TEST_F(Int8File, LoadsABroadcastScaleOfAnyAxis) {
  write_bytes(path("columns"), int8_file(R"("dtype": "F32", "shape": [1, 2])", f32_bytes({0.5f, 2.0f})));
  EXPECT_EQ(floats(load_safetensors(path("columns")).tensors.at("w")), (std::vector<float>{0.5f, -4, 1.5f, 254}));
  write_bytes(path("whole"), int8_file(R"("dtype": "F32", "shape": [1, 1])", f32_bytes({0.25f})));
  EXPECT_EQ(floats(load_safetensors(path("whole")).tensors.at("w")), (std::vector<float>{0.25f, -0.5f, 0.75f, 31.75f}));
}

TEST_F(Int8File, RefusesInconsistentFilesNamingTheTensor) {
  const std::string rows = R"("dtype": "F32", "shape": [2, 1])";
  const float inf = std::numeric_limits<float>::infinity();
  struct Case {
    const char* name;
    std::string bytes;
    const char* problem;
  };
  const std::vector<Case> cases = {
      {"no_scale", int8_file("", ""), "I8 tensor 'w' [2, 2] has no scale tensor 'w.int8_scale'"},
      {"f16_scale", int8_file(R"("dtype": "F16", "shape": [2, 1])", std::string(4, '\0')),
       "the scale tensor 'w.int8_scale' of I8 tensor 'w' [2, 2] must be F32"},
      {"f64_scale", int8_file(R"("dtype": "F64", "shape": [2, 1])", std::string(16, '\0')), "must be F32"},
      {"i8_scale", int8_file(R"("dtype": "I8", "shape": [2, 1])", std::string(2, '\0')),
       "the scale tensor 'w.int8_scale' of I8 tensor 'w' [2, 2] must be F32"},
      {"flat_scale", int8_file(R"("dtype": "F32", "shape": [2])", f32_bytes({1, 1})),
       "the scale tensor 'w.int8_scale' is [2], which does not fit I8 tensor 'w' [2, 2]"},
      {"wide_scale", int8_file(R"("dtype": "F32", "shape": [3, 1])", f32_bytes({1, 1, 1})),
       "the scale tensor 'w.int8_scale' is [3, 1], which does not fit"},
      {"negative", int8_file(rows, f32_bytes({1, -0.5f})), "holds -0.500000 at element 1; a scale must be >= 0"},
      {"nan", int8_file(rows, f32_bytes({std::nanf(""), 1})), "holds nan at element 0"},
      {"infinite", int8_file(rows, f32_bytes({1, inf})), "holds inf at element 1"},
      {"overflowing", int8_file(rows, f32_bytes({1, 3e36f})), "with 127 * scale a finite f32"},
      {"minus_128", int8_file(rows, f32_bytes({1, 1}), std::string("\x01\x80\x03\x7f", 4)),
       "I8 tensor 'w' [2, 2] holds -128 at element 1, outside the symmetric range [-127, 127]"},
      {"orphan_scale",
       raw_file(R"({"v.int8_scale": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})", f32_bytes({1})),
       "tensor 'v.int8_scale' is named as the scale of an I8 tensor 'v', which the file does not hold"},
      {"short_data", raw_file(R"({"w": {"dtype": "I8", "shape": [2, 2], "data_offsets": [0, 3]}})", "abc"),
       "tensor 'w' is I8[2, 2], which needs 4 bytes, but its data_offsets [0, 3] span 3"},
      // Sizes no file can back are refused from the header, before anything is allocated.
      {"huge",
       raw_file(R"({"w": {"dtype": "I8", "shape": [4611686018427387904], "data_offsets": [0, 4611686018427387904]}})",
                ""),
       "beyond the data section of 0 bytes"},
      {"wrapping", raw_file(R"({"w": {"dtype": "F64", "shape": [2305843009213693952], "data_offsets": [0, 0]}})", ""),
       "tensor 'w' has a shape too large to address"},
  };
  for (const Case& c : cases) {
    const std::string file = path(c.name);
    write_bytes(file, c.bytes);
    const std::string message = error_of<IoError>([&] { load_safetensors(file); });
    EXPECT_NE(message.find("safetensors file '" + file + "': "), std::string::npos) << c.name << ": " << message;
    EXPECT_NE(message.find(c.problem), std::string::npos) << c.name << ": " << message;
  }
}

}  // namespace
}  // namespace plexus

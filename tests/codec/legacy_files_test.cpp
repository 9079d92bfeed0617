// Files written by an earlier build of plexus-ae decode, bit for bit, to
// what that build decoded them to, and compressing the same image again in
// the file's format version writes the same bytes; in the sectioned version 5
// it decodes to the same pixels. The files in tests/codec/legacy/ were made once and
// are never regenerated: crop.png (a 150x100 crop of Kodak image 23),
// compressed by plexus-ae with the shipped bls2017 model (bls2017.pxae), and
// the file decompressed (bls2017.decoded.png), on the CPU.
//
// The committed seed corpus of the bitstream fuzzer
// (tests/fuzz/corpus/bitstream_fuzzer.zip, unpacked by CMake) is replayed
// through the harness itself, here in the ordinary test suite, so the harness
// and its seeds (valid files for the harness's built-in models) keep building
// and running without clang or libFuzzer.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <ostream>
#include <string>
#include <vector>

#include "plexus/builtin_layers.h"
#include "plexus/codec/codec_model.h"
#include "plexus/context.h"
#include "plexus/data/image.h"
#include "plexus/testing/gtest_helpers.h"

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv);
extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace plexus {
namespace {

using codec::kSectionedVersion;

const std::string kLegacy = std::string(PLEXUS_SOURCE_DIR) + "/tests/codec/legacy/";

std::vector<std::uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in) << "cannot read " << path;
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

struct LegacyCase {
  const char* model;  // under models/trained/
  const char* file;   // under tests/codec/legacy/, without .pxae
};

void PrintTo(const LegacyCase& c, std::ostream* out) { *out << c.file; }

class LegacyFiles : public ::testing::TestWithParam<LegacyCase> {
 protected:
  std::unique_ptr<codec::CodecModel> load(Device device) {
    return codec::CodecModel::from_file(std::string(PLEXUS_SOURCE_DIR) + "/models/trained/" + GetParam().model,
                                        registry_, device);
  }
  std::vector<std::uint8_t> file() { return read_bytes(kLegacy + GetParam().file + ".pxae"); }
  Registry registry_ = builtin_registry();
};

TEST_P(LegacyFiles, DecodeToTheSamePixelsOnTheCpu) {
  const std::vector<std::uint8_t> bytes = file();
  ASSERT_GT(bytes.size(), 0u);
  const data::Image decoded = load(Device::cpu())->decompress(bytes.data(), bytes.size());
  const data::Image expected = data::read_image(kLegacy + GetParam().file + ".decoded.png");
  ASSERT_EQ(decoded.width, expected.width);
  ASSERT_EQ(decoded.height, expected.height);
  EXPECT_TRUE(decoded.pixels == expected.pixels) << "the reconstruction of " << GetParam().file << ".pxae changed";
}

TEST_P(LegacyFiles, CompressTheSameImageToTheSameBytes) {
  const data::Image image = data::read_image(kLegacy + "crop.png");
  const std::vector<std::uint8_t> legacy = file();
  ASSERT_GT(legacy.size(), 6u);
  auto model = load(Device::cpu());
  model->set_format_version(static_cast<std::uint16_t>(legacy[4] | legacy[5] << 8));
  EXPECT_TRUE(model->compress(image) == legacy) << GetParam().file << ".pxae is no longer what compress writes";
  // Version 5: other bytes, the same latent and pixels.
  model->set_format_version(kSectionedVersion);
  const std::vector<std::uint8_t> sectioned = model->compress(image);
  EXPECT_EQ(sectioned[4], kSectionedVersion);
  EXPECT_EQ(model->decode_latent(sectioned.data(), sectioned.size()).to_values(),
            model->decode_latent(legacy.data(), legacy.size()).to_values());
  EXPECT_TRUE(model->decompress(sectioned.data(), sectioned.size()).pixels ==
              data::read_image(kLegacy + GetParam().file + ".decoded.png").pixels);
}

TEST_P(LegacyFiles, DecodeToTheSameLatentsOnCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  const std::vector<std::uint8_t> bytes = file();
  const codec::CodecModel::Latents cpu = load(Device::cpu())->decode_latents(bytes.data(), bytes.size());
  const codec::CodecModel::Latents cuda = load(Device::cuda(0))->decode_latents(bytes.data(), bytes.size());
  ASSERT_EQ(cpu.latent.shape(), cuda.latent.shape());
  EXPECT_EQ(std::memcmp(cpu.latent.raw_data(), cuda.latent.raw_data(), cpu.latent.nbytes()), 0)
      << "the latent of " << GetParam().file << ".pxae differs between the CPU and CUDA";
  EXPECT_EQ(cpu.indices, cuda.indices);
}

INSTANTIATE_TEST_SUITE_P(ShippedModels, LegacyFiles,
                         ::testing::Values(LegacyCase{"bls2017/model.safetensors", "bls2017"}),
                         [](const auto& info) { return std::string(info.param.file); });

TEST(BitstreamFuzzerCorpus, EverySeedRunsThroughTheHarness) {
  LLVMFuzzerInitialize(nullptr, nullptr);
  const std::filesystem::path corpus = std::filesystem::path(PLEXUS_SEED_CORPUS_DIR) / "bitstream_fuzzer";
  int seeds = 0;
  for (const auto& entry : std::filesystem::directory_iterator(corpus)) {
    std::ifstream in(entry.path(), std::ios::binary);
    const std::vector<std::uint8_t> bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    EXPECT_EQ(LLVMFuzzerTestOneInput(bytes.data(), bytes.size()), 0) << entry.path();
    ++seeds;
  }
  EXPECT_GE(seeds, 10);
  // The empty input and a lone mode byte are refused quietly too.
  const std::uint8_t mode = 3;
  EXPECT_EQ(LLVMFuzzerTestOneInput(&mode, 0), 0);
  EXPECT_EQ(LLVMFuzzerTestOneInput(&mode, 1), 0);
}

}  // namespace
}  // namespace plexus

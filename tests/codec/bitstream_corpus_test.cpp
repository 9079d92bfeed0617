// Replays the committed seed corpus of the bitstream fuzzer
// (tests/fuzz/corpus/bitstream_fuzzer.zip, unpacked by CMake) through the harness itself, in the
// ordinary test suite, so the harness and its seeds (valid files for the
// harness's built-in model) keep building and running without clang or libFuzzer.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv);
extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace {

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

// plexus-ae compress / decompress / export end to end, as a user runs them:
// train writes coding tables, several files at once, decoded images equal to
// eval's reconstructions, and every kind of bad file refused with exit code
// 1 and a message naming the file and what is wrong.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "apps/cli_runner.h"
#include "plexus/checkpoint.h"
#include "plexus/checksum.h"
#include "plexus/data/image.h"

namespace plexus {
namespace {

using testing::contains;
using testing::ScratchFolder;

std::vector<std::uint8_t> read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_all(const std::string& path, const std::vector<std::uint8_t>& bytes) {
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

int count_of(const std::string& text, const std::string& fragment) {
  int count = 0;
  for (std::size_t at = text.find(fragment); at != std::string::npos; at = text.find(fragment, at + 1)) ++count;
  return count;
}

class PlexusAeCodec : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::save_png(folder / "train/a.png", testing::position_image(48, 40));
    auto trained =
        run({"train", "--data", folder / "train", "--model", testing::test_model("tiny.json"), "--patch", "16",
             "--batch", "2", "--lr", "0.005", "--steps", "10", "--device", "cpu", "--out", folder / "run"});
    ASSERT_EQ(trained.exit_code, 0) << trained.describe();
    model = folder / "run/model.safetensors";
    testing::save_png(folder / "images/odd.png", testing::position_image(21, 13));
    testing::save_png(folder / "images/tall.png", testing::position_image(8, 30));
  }
  testing::CommandResult run(const std::vector<std::string>& args) {
    return testing::run_plexus_ae(args, folder.path());
  }
  // Compresses images/odd.png to <name>, returning its bytes.
  std::vector<std::uint8_t> compress_odd(const std::string& name) {
    auto result =
        run({"compress", "--model", model, folder / "images/odd.png", "-o", folder / name, "--device", "cpu"});
    EXPECT_EQ(result.exit_code, 0) << result.describe();
    return read_all(folder / name);
  }
  testing::CommandResult decompress(const std::string& file) {
    return run({"decompress", "--model", model, file, "-o", folder / "out.png", "--overwrite", "--device", "cpu"});
  }
  ScratchFolder folder{"ae-codec"};
  std::string model;
};

TEST_F(PlexusAeCodec, TrainWritesCodingTablesIntoTheModel) {
  const TensorFile file = load_safetensors(model);
  EXPECT_TRUE(file.tensors.count("entropy_model.coding.cdf"));
  EXPECT_TRUE(file.tensors.count("entropy_model.coding.median"));
  EXPECT_EQ(file.tensors.at("entropy_model.coding.median").shape(), (Shape{8}));
  EXPECT_TRUE(file.metadata.count("plexus_ae.coding_tables"));
}

TEST_F(PlexusAeCodec, SeveralFilesRoundTripToTheEvalReconstructions) {
  auto compressed = run({"compress", "--model", model, folder / "images/odd.png", folder / "images/tall.png", "-o",
                         folder / "files/", "--device", "cpu"});
  ASSERT_EQ(compressed.exit_code, 0) << compressed.describe();
  EXPECT_TRUE(contains(compressed.out, "odd.pxae: 21x13")) << compressed.out;
  EXPECT_FALSE(contains(compressed.err, "no coding tables")) << compressed.err;
  auto decompressed = run({"decompress", "--model", model, folder / "files/odd.pxae", folder / "files/tall.pxae", "-o",
                           folder / "decoded/", "--device", "cpu"});
  ASSERT_EQ(decompressed.exit_code, 0) << decompressed.describe();
  auto evaluated =
      run({"eval", "--model", model, "--data", folder / "images", "--out", folder / "recon", "--device", "cpu"});
  ASSERT_EQ(evaluated.exit_code, 0) << evaluated.describe();
  EXPECT_TRUE(contains(evaluated.out, "file bpp")) << evaluated.out;
  for (const std::string name : {"odd", "tall"}) {
    const data::Image decoded = data::read_image(folder / ("decoded/" + name + ".png"));
    const data::Image reconstruction = data::read_image(folder / ("recon/" + name + ".png"));
    EXPECT_EQ(decoded.pixels, reconstruction.pixels) << name;
    // eval's row: the file's bpp is what compress wrote.
    std::istringstream lines(evaluated.out);
    std::string line;
    while (std::getline(lines, line)) {
      std::istringstream fields(line);
      std::string image, size;
      double psnr = 0, bpp = 0, file_bpp = 0, file_psnr = 0;
      if (!(fields >> image >> size >> psnr >> bpp >> file_bpp >> file_psnr) || image != name + ".png") continue;
      const double bytes = static_cast<double>(read_all(folder / ("files/" + name + ".pxae")).size());
      EXPECT_NEAR(file_bpp, 8 * bytes / (decoded.width * decoded.height), 1e-4) << line;
      EXPECT_NEAR(file_psnr, psnr, 0.001) << line;
    }
  }
}

TEST_F(PlexusAeCodec, AGreyImageComesBackGrey) {
  data::Image source = testing::position_image(21, 13);
  for (std::size_t i = 0; i < source.pixels.size(); i += 3)
    source.pixels[i + 1] = source.pixels[i + 2] = source.pixels[i];
  data::write_png(folder / "images/grey.png", source, data::PngColour::grey);
  auto compressed =
      run({"compress", "--model", model, folder / "images/grey.png", "-o", folder / "grey.pxae", "--device", "cpu"});
  ASSERT_EQ(compressed.exit_code, 0) << compressed.describe();
  EXPECT_TRUE(contains(compressed.err, "is grey: coded as RGB, decompressed to grey again")) << compressed.err;
  EXPECT_FALSE(contains(compressed.err, "converting image")) << compressed.err;
  const std::vector<std::uint8_t> bytes = read_all(folder / "grey.pxae");
  EXPECT_EQ(bytes[6] | bytes[7] << 8, 1) << "the grey flag";
  auto decompressed =
      run({"decompress", "--model", model, folder / "grey.pxae", "-o", folder / "grey-out.png", "--device", "cpu"});
  ASSERT_EQ(decompressed.exit_code, 0) << decompressed.describe();
  const std::vector<std::uint8_t> png = read_all(folder / "grey-out.png");
  ASSERT_GT(png.size(), 26u);
  EXPECT_EQ(png[25], 0) << "PNG colour type 0, grey";
  data::Image decoded;
  std::string reason;
  data::ImageConversions conversions;
  ASSERT_TRUE(
      data::try_read_image(folder / "grey-out.png", decoded, reason, data::kDefaultMaxImagePixels, &conversions))
      << reason;
  EXPECT_TRUE(conversions.grey_expanded);
  EXPECT_EQ(decoded.width, 21);
  EXPECT_EQ(decoded.height, 13);
  // An RGB image stays RGB.
  compress_odd("rgb.pxae");
  const std::vector<std::uint8_t> rgb = read_all(folder / "rgb.pxae");
  EXPECT_EQ(rgb[6] | rgb[7] << 8, 0);
  ASSERT_EQ(decompress(folder / "rgb.pxae").exit_code, 0);
  EXPECT_EQ(read_all(folder / "out.png")[25], 2) << "PNG colour type 2, RGB";
}

// A PNG's ICC profile goes into the file as its own section and comes back
// in the decoded PNG, byte for byte; the pixels do not depend on it, and
// --metadata none leaves it out.
TEST_F(PlexusAeCodec, AnIccProfileIsKeptThroughCompressAndDecompress) {
  data::Image tagged = testing::position_image(21, 13);
  tagged.icc_profile = testing::icc_profile("RGB ", 1000, 5);
  data::write_png(folder / "images/tagged.png", tagged);
  auto compressed = run(
      {"compress", "--model", model, folder / "images/tagged.png", "-o", folder / "tagged.pxae", "--device", "cpu"});
  ASSERT_EQ(compressed.exit_code, 0) << compressed.describe();
  auto info = run({"info", folder / "tagged.pxae"});
  EXPECT_TRUE(contains(info.out, "ICC profile of 1144 bytes")) << info.describe();
  ASSERT_EQ(decompress(folder / "tagged.pxae").exit_code, 0);
  const data::Image decoded = data::read_image(folder / "out.png");
  EXPECT_EQ(decoded.icc_profile, tagged.icc_profile);
  const std::vector<std::uint8_t> untagged = compress_odd("untagged.pxae");
  EXPECT_EQ(read_all(folder / "tagged.pxae").size(), untagged.size() + 8 + 1144) << "one 8-byte section header more";
  ASSERT_EQ(decompress(folder / "untagged.pxae").exit_code, 0);
  EXPECT_EQ(data::read_image(folder / "out.png").pixels, decoded.pixels);
  EXPECT_TRUE(data::read_image(folder / "out.png").icc_profile.empty());
  auto stripped = run({"compress", "--model", model, folder / "images/tagged.png", "-o", folder / "stripped.pxae",
                       "--device", "cpu", "--metadata", "none"});
  ASSERT_EQ(stripped.exit_code, 0) << stripped.describe();
  EXPECT_EQ(read_all(folder / "stripped.pxae"), untagged);
  auto bad = run({"compress", "--model", model, folder / "images/tagged.png", "--metadata", "exif"});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_TRUE(contains(bad.err, "--metadata")) << bad.err;
}

TEST_F(PlexusAeCodec, CompressingTwiceGivesTheSameBytes) { EXPECT_EQ(compress_odd("a.pxae"), compress_odd("b.pxae")); }

// --cpu-threads: the same file and the same decoded image for 1 and 2
// threads, on an image large enough that every layer spreads it over blocks.
TEST_F(PlexusAeCodec, CpuThreadCountsGiveTheSameFileAndImage) {
  testing::save_png(folder / "large.png", testing::position_image(203, 157));
  auto compress = [&](const std::string& threads) {
    const std::string file = folder / ("large-" + threads + ".pxae");
    auto result = run(
        {"compress", "--model", model, folder / "large.png", "-o", file, "--device", "cpu", "--cpu-threads", threads});
    EXPECT_EQ(result.exit_code, 0) << result.describe();
    return read_all(file);
  };
  auto decompress = [&](const std::string& threads) {
    const std::string image = folder / ("large-" + threads + ".png");
    auto result = run({"decompress", "--model", model, folder / "large-1.pxae", "-o", image, "--device", "cpu",
                       "--cpu-threads", threads});
    EXPECT_EQ(result.exit_code, 0) << result.describe();
    return read_all(image);
  };
  const std::vector<std::uint8_t> file = compress("1");
  ASSERT_FALSE(file.empty());
  EXPECT_TRUE(file == compress("2")) << "compress --cpu-threads 1 and 2 wrote different files";
  const std::vector<std::uint8_t> image = decompress("1");
  ASSERT_FALSE(image.empty());
  EXPECT_TRUE(image == decompress("2")) << "decompress --cpu-threads 1 and 2 wrote different images";
}

// compress --max-image-pixels refuses a larger image from its header, naming the option that raises the
// limit, and compresses it once the limit allows; --cpu-threads has an upper bound.
TEST_F(PlexusAeCodec, CompressRefusesImagesOverItsPixelLimitAndAbsurdThreadCounts) {
  const std::string odd = folder / "images/odd.png";  // 21x13 = 273 pixels
  auto refused = run(
      {"compress", "--model", model, odd, "-o", folder / "odd.pxae", "--device", "cpu", "--max-image-pixels", "272"});
  EXPECT_EQ(refused.exit_code, 1) << refused.describe();
  EXPECT_TRUE(contains(refused.err, "cannot compress '" + odd +
                                        "': the image is 21x13 = 273 pixels, more than the limit of 272 pixels; "
                                        "raise the limit with --max-image-pixels"))
      << refused.describe();
  EXPECT_FALSE(std::filesystem::exists(folder / "odd.pxae"));
  auto allowed = run(
      {"compress", "--model", model, odd, "-o", folder / "odd.pxae", "--device", "cpu", "--max-image-pixels", "273"});
  EXPECT_EQ(allowed.exit_code, 0) << allowed.describe();
  EXPECT_TRUE(read_all(folder / "odd.pxae") == compress_odd("default.pxae"));
  for (const char* command : {"compress", "decompress"}) {
    auto threads = run({command, "--model", model, odd, "--device", "cpu", "--cpu-threads", "100000"});
    EXPECT_EQ(threads.exit_code, 1) << threads.describe();
    EXPECT_TRUE(contains(threads.err, "--cpu-threads must be in [0, 1024] (0: every core), got 100000"))
        << threads.describe();
  }
}

// --max-memory refuses before work, naming the bound and the need, and an absurd size; a bound that fits
// gives the same file. --progress writes the per-file line to stderr, which is no terminal here.
TEST_F(PlexusAeCodec, MaxMemoryRefusesBeforeWorkAndProgressShowsOnRequest) {
  const std::string odd = folder / "images/odd.png";
  auto refused =
      run({"compress", "--model", model, odd, "-o", folder / "tight.pxae", "--device", "cpu", "--max-memory", "1M"});
  EXPECT_EQ(refused.exit_code, 1) << refused.describe();
  EXPECT_TRUE(contains(refused.err, "within --max-memory 0.00 GB: it needs about")) << refused.describe();
  EXPECT_FALSE(std::filesystem::exists(folder / "tight.pxae"));
  auto bad = run({"compress", "--model", model, odd, "--device", "cpu", "--max-memory", "lots"});
  EXPECT_EQ(bad.exit_code, 1) << bad.describe();
  EXPECT_TRUE(contains(bad.err, "--max-memory lots is not a size")) << bad.describe();
  auto fits = run({"compress", "--model", model, odd, "-o", folder / "fits.pxae", "--device", "cpu", "--max-memory",
                   "4G", "--progress"});
  EXPECT_EQ(fits.exit_code, 0) << fits.describe();
  EXPECT_TRUE(read_all(folder / "fits.pxae") == compress_odd("default.pxae"));
  EXPECT_TRUE(contains(fits.err, "[1/1] " + odd)) << fits.describe();
  auto quiet = run({"compress", "--model", model, odd, "-o", folder / "quiet.pxae", "--device", "cpu"});
  EXPECT_FALSE(contains(quiet.err, "[1/1]")) << quiet.describe();
  auto decoded = run({"decompress", "--model", model, folder / "fits.pxae", "-o", folder / "fits.png", "--device",
                      "cpu", "--max-memory", "1M"});
  EXPECT_EQ(decoded.exit_code, 1) << decoded.describe();
  EXPECT_TRUE(contains(decoded.err, "cannot decompress a 21x13 image within --max-memory")) << decoded.describe();
}

// info reads a file without its model: the size and bits per pixel, the format version, its coded streams and
// the codec section's fingerprint (bytes 16-23), and the model's fingerprint stored at bytes 8-15
// (little-endian, docs/bitstream.md); a corrupt file or another kind of file is named with what is wrong, and
// exits 1.
TEST_F(PlexusAeCodec, InfoDescribesAFileWithoutItsModel) {
  const std::vector<std::uint8_t> file = compress_odd("odd.pxae");
  ASSERT_GT(file.size(), 24u);
  std::uint64_t fingerprint = 0, codec = 0;
  for (int k = 0; k < 8; ++k) fingerprint |= std::uint64_t{file[8 + k]} << (8 * k);
  for (int k = 0; k < 8; ++k) codec |= std::uint64_t{file[16 + k]} << (8 * k);
  char expected[200];
  std::snprintf(expected, sizeof expected,
                "odd.pxae: 21x13 RGB, %zu bytes, %.4f bpp; format version 5 (1 coded stream, codec section %016llx), "
                "model fingerprint %016llx\n",
                file.size(), 8.0 * file.size() / (21 * 13), static_cast<unsigned long long>(codec),
                static_cast<unsigned long long>(fingerprint));
  auto info = run({"info", folder / "odd.pxae"});
  EXPECT_EQ(info.exit_code, 0) << info.describe();
  EXPECT_TRUE(contains(info.out, expected)) << "expected: " << expected << info.describe();

  std::vector<std::uint8_t> corrupt = file;
  corrupt[30] ^= 1;
  write_all(folder / "corrupt.pxae", corrupt);
  auto both = run({"info", folder / "corrupt.pxae", folder / "images/odd.png", folder / "odd.pxae"});
  EXPECT_EQ(both.exit_code, 1) << both.describe();
  EXPECT_TRUE(contains(both.err, "cannot read '" + (folder / "corrupt.pxae") + "': checksum mismatch")) << both.err;
  EXPECT_TRUE(contains(both.err, "cannot read '" + (folder / "images/odd.png") + "': not a plexus-ae compressed"))
      << both.err;
  EXPECT_TRUE(contains(both.out, "odd.pxae: 21x13 RGB")) << both.describe();  // the good file is still described
}

TEST_F(PlexusAeCodec, BadFilesExitWithOneAndSayWhatIsWrong) {
  const std::vector<std::uint8_t> good = compress_odd("good.pxae");
  auto check = [&](const std::string& name, const std::vector<std::uint8_t>& bytes, const std::string& reason) {
    write_all(folder / name, bytes);
    auto result = decompress(folder / name);
    EXPECT_EQ(result.exit_code, 1) << result.describe();
    EXPECT_TRUE(contains(result.err, "cannot decompress '" + (folder / name) + "': ")) << result.err;
    EXPECT_TRUE(contains(result.err, reason)) << result.err;
  };
  check("truncated.pxae", {good.begin(), good.end() - 7}, "truncated");
  std::vector<std::uint8_t> flipped = good;
  flipped[good.size() / 2] ^= 0x10;
  check("flipped.pxae", flipped, "checksum mismatch: the file is corrupt");
  std::vector<std::uint8_t> extended = good;
  extended.insert(extended.end(), {1, 2, 3});
  check("extended.pxae", extended, "extended: 3 unexpected byte(s)");
  std::vector<std::uint8_t> newer = good;
  newer[4] = 7;
  const std::uint32_t crc = plexus::crc32(newer.data(), newer.size() - 4);
  for (int k = 0; k < 4; ++k) newer[newer.size() - 4 + k] = static_cast<std::uint8_t>(crc >> (8 * k));
  check("newer.pxae", newer, "format version 7, but this plexus-ae reads only versions 1 to 5");
  check("text.pxae", {'h', 'e', 'l', 'l', 'o', '\n'}, "not a plexus-ae compressed image");

  // A file of another model: trained with another seed.
  auto other = run({"train", "--data", folder / "train", "--model", testing::test_model("tiny.json"), "--patch", "16",
                    "--batch", "2", "--steps", "2", "--seed", "9", "--device", "cpu", "--out", folder / "other"});
  ASSERT_EQ(other.exit_code, 0) << other.describe();
  auto foreign = run({"compress", "--model", folder / "other/model.safetensors", folder / "images/odd.png", "-o",
                      folder / "foreign.pxae", "--device", "cpu"});
  ASSERT_EQ(foreign.exit_code, 0) << foreign.describe();
  auto result = decompress(folder / "foreign.pxae");
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_TRUE(contains(result.err, "compressed with the model of fingerprint")) << result.err;
  EXPECT_TRUE(contains(result.err, "'" + model + "' has fingerprint")) << result.err;
  // Without --model, none of the shipped models fits it either.
  auto guessed = run({"decompress", folder / "foreign.pxae", "-o", folder / "guess.png", "--device", "cpu"});
  EXPECT_EQ(guessed.exit_code, 1);
  EXPECT_TRUE(contains(guessed.err, "which is none of the shipped models")) << guessed.err;
}

// "-" is standard input and output, as for cwebp and dwebp: the same bytes
// and pixels as through files, the report lines on stderr.
TEST_F(PlexusAeCodec, StandardInputAndOutputWorkAsFilesDo) {
  const std::vector<std::uint8_t> file = compress_odd("odd.pxae");
  auto piped = testing::run_plexus_ae({"compress", "--model", model, "-", "--device", "cpu"}, folder.path(),
                                      folder / "images/odd.png");
  ASSERT_EQ(piped.exit_code, 0) << piped.describe();
  EXPECT_TRUE(std::vector<std::uint8_t>(piped.out.begin(), piped.out.end()) == file) << "compress - > stdout";
  EXPECT_TRUE(contains(piped.err, "- -> -: 21x13, " + std::to_string(file.size()) + " bytes")) << piped.err;
  auto to_stdout = run({"compress", "--model", model, folder / "images/odd.png", "-o", "-", "--device", "cpu"});
  ASSERT_EQ(to_stdout.exit_code, 0) << to_stdout.describe();
  EXPECT_TRUE(std::vector<std::uint8_t>(to_stdout.out.begin(), to_stdout.out.end()) == file) << "compress -o -";

  ASSERT_EQ(decompress(folder / "odd.pxae").exit_code, 0);  // out.png, the reference
  auto decoded = testing::run_plexus_ae({"decompress", "--model", model, "-", "--device", "cpu"}, folder.path(),
                                        folder / "odd.pxae");
  ASSERT_EQ(decoded.exit_code, 0) << decoded.describe();
  EXPECT_TRUE(contains(decoded.err, "- -> -: 21x13")) << decoded.err;
  write_all(folder / "piped.png", std::vector<std::uint8_t>(decoded.out.begin(), decoded.out.end()));
  EXPECT_EQ(data::read_image(folder / "piped.png").pixels, data::read_image(folder / "out.png").pixels);
  // Without --model: the shipped models are looked up from the piped file's head (none fits it).
  auto guessed = testing::run_plexus_ae({"decompress", "-", "-o", folder / "guess.png", "--device", "cpu"},
                                        folder.path(), folder / "odd.pxae");
  EXPECT_EQ(guessed.exit_code, 1);
  EXPECT_TRUE(contains(guessed.err, "cannot decompress '-': it needs the model of fingerprint")) << guessed.err;

  auto bad = testing::run_plexus_ae({"decompress", "--model", model, "-", "--device", "cpu"}, folder.path(),
                                    folder / "images/odd.png");
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_TRUE(contains(bad.err, "cannot decompress '-': not a plexus-ae compressed image")) << bad.err;
  EXPECT_TRUE(bad.out.empty());
  auto twice = run({"compress", "--model", model, "-", "-", "--device", "cpu"});
  EXPECT_EQ(twice.exit_code, 1);
  EXPECT_TRUE(contains(twice.err, "'-' (standard input) is given more than once")) << twice.err;
  auto two_to_stdout = run({"compress", "--model", model, folder / "images/odd.png", folder / "images/tall.png", "-o",
                            "-", "--device", "cpu"});
  EXPECT_EQ(two_to_stdout.exit_code, 1);
  EXPECT_TRUE(contains(two_to_stdout.err, "-o - (standard output) takes one input, not 2")) << two_to_stdout.err;
  auto into_folder = run({"compress", "--model", model, "-", "-o", folder / "dir/", "--device", "cpu"});
  EXPECT_EQ(into_folder.exit_code, 1);
  EXPECT_TRUE(contains(into_folder.err, "'-' (standard input) has no file name to write into -o")) << into_folder.err;
}

TEST_F(PlexusAeCodec, OneBadFileAmongSeveralStillDecodesTheOthers) {
  compress_odd("good.pxae");
  write_all(folder / "bad.pxae", {'P', 'X', 'A', 'E', 1, 0});
  auto result = run({"decompress", "--model", model, folder / "bad.pxae", folder / "good.pxae", "-o", folder / "dec/",
                     "--device", "cpu"});
  EXPECT_EQ(result.exit_code, 1) << result.describe();
  EXPECT_TRUE(contains(result.err, "cannot decompress '" + (folder / "bad.pxae") + "': truncated")) << result.err;
  EXPECT_TRUE(std::filesystem::exists(folder / "dec/good.png"));
  EXPECT_FALSE(std::filesystem::exists(folder / "dec/bad.png"));
}

TEST_F(PlexusAeCodec, ExistingOutputsAreKeptWithoutOverwrite) {
  compress_odd("kept.pxae");
  auto again =
      run({"compress", "--model", model, folder / "images/odd.png", "-o", folder / "kept.pxae", "--device", "cpu"});
  EXPECT_EQ(again.exit_code, 1);
  EXPECT_TRUE(contains(again.err, "already exists; pass --overwrite")) << again.err;
}

TEST_F(PlexusAeCodec, AModelWithoutTablesGetsThemOnLoadAndExportStoresThem) {
  TensorFile file = load_safetensors(model);
  for (auto it = file.tensors.begin(); it != file.tensors.end();)
    it = it->first.find(".coding.") != std::string::npos ? file.tensors.erase(it) : std::next(it);
  const std::string old_model = folder / "old.safetensors";
  save_safetensors(old_model, file);
  auto computed =
      run({"compress", "--model", old_model, folder / "images/odd.png", "-o", folder / "old.pxae", "--device", "cpu"});
  ASSERT_EQ(computed.exit_code, 0) << computed.describe();
  EXPECT_EQ(count_of(computed.err, "has no coding tables; computed them"), 1) << computed.err;
  // The computed tables are the ones train stored: the same file.
  EXPECT_EQ(read_all(folder / "old.pxae"), compress_odd("new.pxae"));

  auto exported = run({"export", "--model", old_model});
  ASSERT_EQ(exported.exit_code, 0) << exported.describe();
  EXPECT_TRUE(contains(exported.out, "8 channels of coding tables, model fingerprint")) << exported.out;
  auto stored = run({"compress", "--model", old_model, folder / "images/odd.png", "-o", folder / "old.pxae",
                     "--overwrite", "--device", "cpu"});
  ASSERT_EQ(stored.exit_code, 0) << stored.describe();
  EXPECT_FALSE(contains(stored.err, "no coding tables")) << stored.err;
  // export records the fingerprint the model's files carry (bytes 8..15, little-endian).
  const std::vector<std::uint8_t> coded = read_all(folder / "old.pxae");
  ASSERT_GE(coded.size(), 16u);
  char digits[17];
  for (int k = 0; k < 8; ++k) std::snprintf(digits + 2 * k, 3, "%02x", coded[15 - k]);
  EXPECT_EQ(load_safetensors(old_model).metadata["plexus_ae.model_fingerprint"], std::string(digits));

  auto checkpoint = run({"export", "--model", folder / "run/checkpoint.safetensors"});
  EXPECT_EQ(checkpoint.exit_code, 1);
  EXPECT_TRUE(contains(checkpoint.err, "is a training checkpoint (it holds optimiser state); give --out"))
      << checkpoint.err;
  auto from_checkpoint =
      run({"export", "--model", folder / "run/checkpoint.safetensors", "--out", folder / "exported.safetensors"});
  ASSERT_EQ(from_checkpoint.exit_code, 0) << from_checkpoint.describe();
  EXPECT_FALSE(load_safetensors(folder / "exported.safetensors").metadata.count("optimizer"));
}

// decompress --max-image-pixels: a file whose header describes a larger image
// is refused before any model is loaded (the model here does not exist), with
// the file, the image's size, the limit and the option to raise it; the
// default is train's and eval's, 50,000,000 pixels.
TEST(PlexusAeDecompressLimit, ALargerImageIsRefusedFromTheHeader) {
  ScratchFolder folder{"ae-decompress-limit"};
  // A version-1 header: magic, version 1, flags 0, fingerprint, width, height; the rest zeros.
  auto header_file = [&](const std::string& name, std::uint32_t width, std::uint32_t height) {
    std::vector<std::uint8_t> bytes{'P', 'X', 'A', 'E', 1, 0, 0, 0};
    bytes.resize(64, 0);
    for (int k = 0; k < 4; ++k) {
      bytes[16 + k] = static_cast<std::uint8_t>(width >> (8 * k));
      bytes[20 + k] = static_cast<std::uint8_t>(height >> (8 * k));
    }
    write_all(folder / name, bytes);
    return folder / name;
  };
  const std::string large = header_file("large.pxae", 8000, 7000);
  const std::string small = header_file("small.pxae", 100, 50);
  const std::string absent_model = folder / "absent.safetensors";
  auto by_default = testing::run_plexus_ae(
      {"decompress", "--model", absent_model, large, "-o", folder / "large.png", "--device", "cpu"}, folder.path());
  EXPECT_EQ(by_default.exit_code, 1) << by_default.describe();
  EXPECT_TRUE(
      contains(by_default.err, "cannot decompress '" + large +
                                   "': the image is 8000x7000 = 56000000 pixels, "
                                   "more than the limit of 50000000 pixels; raise the limit with --max-image-pixels"))
      << by_default.err;
  EXPECT_FALSE(contains(by_default.err, "absent.safetensors")) << by_default.err;
  auto lowered = testing::run_plexus_ae({"decompress", "--model", absent_model, small, "-o", folder / "small.png",
                                         "--max-image-pixels", "4999", "--device", "cpu"},
                                        folder.path());
  EXPECT_EQ(lowered.exit_code, 1) << lowered.describe();
  EXPECT_TRUE(contains(lowered.err, "cannot decompress '" + small +
                                        "': the image is 100x50 = 5000 pixels, more than "
                                        "the limit of 4999 pixels; raise the limit with --max-image-pixels"))
      << lowered.err;
  // Within the limit, the file goes on to its model.
  auto within = testing::run_plexus_ae({"decompress", "--model", absent_model, small, "-o", folder / "small.png",
                                        "--max-image-pixels", "5000", "--device", "cpu"},
                                       folder.path());
  EXPECT_EQ(within.exit_code, 1) << within.describe();
  EXPECT_FALSE(contains(within.err, "pixels")) << within.err;
  EXPECT_FALSE(std::filesystem::exists(folder / "small.png"));
}

// compress --quality N: a catalog entry whose model is absent is refused with
// exit code 1, saying it is not shipped and how to train it; --model and
// --quality exclude each other; without either, compress takes quality 3.
TEST(PlexusAeCompressQuality, AQualityNotShippedIsRefusedWithItsTrainingCommand) {
  ScratchFolder folder{"ae-quality"};
  testing::save_png(folder / "photo.png", testing::position_image(16, 16));
  std::ofstream(folder / "catalog.json")
      << R"({"qualities": [{"quality": 3, "spec": "bmshj2018-hyperprior", "lambda": 0.0067,)"
      << R"( "model": "absent-q3/model.safetensors"}]})";
  ::setenv("PLEXUS_AE_QUALITY_CATALOG", (folder / "catalog.json").c_str(), 1);
  auto result = testing::run_plexus_ae({"compress", "--quality", "3", folder / "photo.png"}, folder.path());
  auto neither = testing::run_plexus_ae({"compress", folder / "photo.png"}, folder.path());
  ::unsetenv("PLEXUS_AE_QUALITY_CATALOG");
  EXPECT_EQ(result.exit_code, 1) << result.describe();
  EXPECT_TRUE(contains(result.err, "quality 3 (bmshj2018-hyperprior, lambda 0.0067) is not shipped")) << result.err;
  EXPECT_TRUE(contains(result.err, "plexus-ae train --data BSDS500/train --model bmshj2018-hyperprior --lambda 0.0067"))
      << result.err;
  EXPECT_FALSE(std::filesystem::exists(folder / "photo.pxae"));

  auto both = testing::run_plexus_ae(
      {"compress", "--quality", "3", "--model", folder / "m.safetensors", folder / "photo.png"}, folder.path());
  EXPECT_EQ(both.exit_code, 1) << both.describe();
  EXPECT_TRUE(contains(both.err, "give --model or --quality, not both")) << both.err;
  EXPECT_EQ(neither.exit_code, 1) << neither.describe();
  EXPECT_TRUE(contains(neither.err, "quality 3 (bmshj2018-hyperprior, lambda 0.0067) is not shipped")) << neither.err;
}

// -q is --quality; a value that is not a number of the catalog's range is
// refused with the range and the qualities whose model is present; a
// fractional one only lies between the qualities of a variable-rate model.
TEST(PlexusAeCompressQuality, QualityHasAShortNameAndTakesANumber) {
  ScratchFolder folder{"ae-quality-number"};
  testing::save_png(folder / "photo.png", testing::position_image(16, 16));
  std::filesystem::create_directories(folder / "present-q5");
  std::ofstream(folder / "present-q5/model.safetensors") << "a model file";
  std::ofstream(folder / "catalog.json")
      << R"({"qualities": [{"quality": 2, "spec": "bmshj2018-hyperprior", "lambda": 0.0067,)"
      << R"( "model": "absent-q2/model.safetensors"},)"
      << R"( {"quality": 5, "spec": "bmshj2018-hyperprior", "lambda": 0.025, "model": "present-q5/model.safetensors"}]})";
  ::setenv("PLEXUS_AE_QUALITY_CATALOG", (folder / "catalog.json").c_str(), 1);
  auto short_name = testing::run_plexus_ae({"compress", "-q", "2", folder / "photo.png"}, folder.path());
  std::vector<testing::CommandResult> not_numbers;
  for (const std::string text : {"three", "0", "-1", "3x"})
    not_numbers.push_back(
        testing::run_plexus_ae({"compress", "--quality=" + text, folder / "photo.png"}, folder.path()));
  auto between = testing::run_plexus_ae({"compress", "--quality", "3.5", folder / "photo.png"}, folder.path());
  ::unsetenv("PLEXUS_AE_QUALITY_CATALOG");
  EXPECT_EQ(between.exit_code, 1) << between.describe();
  EXPECT_TRUE(contains(between.err, "quality 3.5 lies between qualities 3 and 4, which are not rate levels of one "
                                    "variable-rate model"))
      << between.err;
  EXPECT_EQ(short_name.exit_code, 1) << short_name.describe();
  EXPECT_TRUE(contains(short_name.err, "quality 2 (bmshj2018-hyperprior, lambda 0.0067) is not shipped"))
      << short_name.err;
  for (const testing::CommandResult& result : not_numbers) {
    EXPECT_EQ(result.exit_code, 1) << result.describe();
    EXPECT_TRUE(contains(result.err, "--quality takes a number 2-5 (the shipped qualities: 5) (fractional between "
                                     "the qualities of a variable-rate model), got '"))
        << result.err;
  }
  EXPECT_FALSE(std::filesystem::exists(folder / "photo.pxae"));
}

// The qualities this tree ships (models/trained/mbt2018-mean-vr, one
// variable-rate mbt2018-mean for qualities 1 to 6) code a Kodak crop through
// --quality alone, a fractional one too: the rate grows with the quality,
// decompress finds the model from the file, and the decoded image, compared
// here pixel by pixel with the original, is at the model's measured quality
// (on the 24 full-size Kodak images 28.2 dB at 0.19 bpp for quality 1, 35.6
// dB at 0.94 bpp for quality 6).
TEST(PlexusAeCompressQuality, TheShippedQualitiesCodeAnImage) {
  ScratchFolder folder{"ae-quality-shipped"};
  const std::string original = std::string(PLEXUS_SOURCE_DIR) + "/data/eval-sample/kodim23.png";
  double previous_bpp = 0;
  for (const auto& [quality, least_psnr] :
       std::vector<std::pair<std::string, double>>{{"1", 27}, {"3.5", 31}, {"6", 34}}) {
    const std::string file = folder / ("q" + quality + ".pxae");
    auto compressed = testing::run_plexus_ae(
        {"compress", "--quality", quality, original, "-o", file, "--device", "cpu"}, folder.path());
    ASSERT_EQ(compressed.exit_code, 0) << compressed.describe();
    const double bpp = 8.0 * static_cast<double>(std::filesystem::file_size(file)) / (500.0 * 500.0);
    EXPECT_GT(bpp, previous_bpp) << "quality " << quality;
    EXPECT_LT(bpp, 1.5) << "quality " << quality;
    previous_bpp = bpp;
    auto decompressed =
        testing::run_plexus_ae({"decompress", file, "-o", file + ".png", "--device", "cpu"}, folder.path());
    ASSERT_EQ(decompressed.exit_code, 0) << decompressed.describe();
    const data::Image a = data::read_image(original), b = data::read_image(file + ".png");
    ASSERT_EQ(a.width, b.width);
    ASSERT_EQ(a.height, b.height);
    double squared = 0;
    for (std::size_t i = 0; i < a.pixels.size(); ++i) squared += std::pow(double(a.pixels[i]) - double(b.pixels[i]), 2);
    const double psnr = 10 * std::log10(255.0 * 255.0 / (squared / static_cast<double>(a.pixels.size())));
    EXPECT_GT(psnr, least_psnr) << "quality " << quality << " at " << bpp << " bpp";
  }
  // info gives a variable-rate file's rate level: quality 3.5 lies halfway between levels 2 and 3.
  auto info = testing::run_plexus_ae({"info", folder / "q3.5.pxae"}, folder.path());
  EXPECT_EQ(info.exit_code, 0) << info.describe();
  EXPECT_TRUE(contains(info.out, "500x500 RGB")) << info.out;
  EXPECT_TRUE(contains(info.out, "format version 5 (2 coded streams, codec section ")) << info.out;
  EXPECT_TRUE(contains(info.out, "rate level 2.5\n")) << info.out;
  // Without --model or --quality: the file of quality 3.
  const std::string q3 = folder / "q3.pxae", plain = folder / "plain.pxae";
  for (const auto& [args, file] :
       std::vector<std::pair<std::vector<std::string>, std::string>>{{{"--quality", "3"}, q3}, {{}, plain}}) {
    std::vector<std::string> command{"compress", original, "-o", file, "--device", "cpu"};
    command.insert(command.begin() + 1, args.begin(), args.end());
    auto compressed = testing::run_plexus_ae(command, folder.path());
    ASSERT_EQ(compressed.exit_code, 0) << compressed.describe();
  }
  EXPECT_FALSE(read_all(q3).empty());
  EXPECT_TRUE(read_all(q3) == read_all(plain)) << "compress without --quality should code as --quality 3";
}

}  // namespace
}  // namespace plexus

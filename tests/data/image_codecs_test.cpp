// The libpng and libjpeg decoders: every PNG layout decodes to the pixels it
// was written from (an independent generator, tests/fuzz/make_image_seeds.c);
// JPEGs decode close to them; damaged files, files that are neither, and
// headers claiming more pixels than the limit are refused with a reason,
// before any pixel memory is allocated.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <string>

#include "data/data_test_support.h"
#include "plexus/data/image.h"
#include "plexus/data/image_folder.h"

namespace plexus {
namespace {

using data::Image;
using testing::ScratchFolder;

// The image_decoders fuzzer's seeds (tests/fuzz/corpus/image_decoders.zip, unpacked by CMake).
const std::string kSeeds = std::string(PLEXUS_SEED_CORPUS_DIR) + "/image_decoders/";
constexpr int kWidth = 13, kHeight = 9;

// The generator's sample value (make_image_seeds.c).
std::uint8_t sample(int x, int y, int c) { return static_cast<std::uint8_t>(x * 19 + y * 7 + c * 60); }

Image decode(const std::string& name) {
  Image image;
  std::string reason;
  EXPECT_TRUE(data::try_read_image(kSeeds + name, image, reason)) << name << ": " << reason;
  EXPECT_EQ(image.width, kWidth) << name;
  EXPECT_EQ(image.height, kHeight) << name;
  return image;
}

TEST(ImageCodecs, EightBitRgbPngIsExact) {
  for (const char* name : {"rgb.png", "rgb-interlaced.png", "rgba.png"}) {
    Image image = decode(name);
    for (int y = 0; y < kHeight; ++y)
      for (int x = 0; x < kWidth; ++x)
        for (int c = 0; c < 3; ++c) ASSERT_EQ(image.at(y, x, c), sample(x, y, c)) << name << " at " << x << "," << y;
  }
}

TEST(ImageCodecs, SixteenBitPngKeepsTheHighByte) {
  for (const char* name : {"rgb-16bit.png", "rgba-16bit-interlaced.png"}) {
    Image image = decode(name);
    for (int y = 0; y < kHeight; ++y)
      for (int x = 0; x < kWidth; ++x)
        for (int c = 0; c < 3; ++c) ASSERT_EQ(image.at(y, x, c), sample(x, y, c)) << name;
  }
}

TEST(ImageCodecs, GreyAndPalettePngsExpandToRgb) {
  for (const char* name : {"grey.png", "grey-alpha.png"}) {
    Image image = decode(name);
    for (int y = 0; y < kHeight; ++y)
      for (int x = 0; x < kWidth; ++x)
        for (int c = 0; c < 3; ++c) ASSERT_EQ(image.at(y, x, c), sample(x, y, 0)) << name;
  }
  Image one_bit = decode("grey-1bit.png");
  EXPECT_EQ(one_bit.at(0, 0, 0), 0);
  EXPECT_EQ(one_bit.at(0, 1, 1), 255);
  const std::uint8_t palette[4][3] = {{0, 0, 0}, {255, 0, 0}, {0, 255, 0}, {0, 0, 255}};
  Image indexed = decode("palette-trns.png");  // transparency is dropped, colours kept
  for (int y = 0; y < kHeight; ++y)
    for (int x = 0; x < kWidth; ++x)
      for (int c = 0; c < 3; ++c) ASSERT_EQ(indexed.at(y, x, c), palette[(x + y) % 4][c]);
}

TEST(ImageCodecs, JpegsDecodeCloseToTheirSource) {
  for (const char* name : {"baseline.jpg", "progressive.jpg", "restart.jpg", "cmyk.jpg"}) {
    Image image = decode(name);
    const bool cmyk = std::string(name) == "cmyk.jpg";
    double error = 0;
    for (int y = 0; y < kHeight; ++y)
      for (int x = 0; x < kWidth; ++x)
        for (int c = 0; c < 3; ++c) {
          // CMYK (Adobe, inverted): R = C * K / 255.
          const double expected = cmyk ? sample(x, y, c) * sample(x, y, 3) / 255.0 : sample(x, y, c);
          error += std::abs(image.at(y, x, c) - expected);
        }
    // Quality 80 with chroma subsampling on a busy 13x9 image: a loose bound
    // that still fails for a wrong colour conversion or pixel order.
    EXPECT_LT(error / (kWidth * kHeight * 3), 24.0) << name;
  }
  Image grey = decode("grey.jpg");
  for (int y = 0; y < kHeight; ++y)
    for (int x = 0; x < kWidth; ++x) {
      EXPECT_EQ(grey.at(y, x, 0), grey.at(y, x, 1));
      EXPECT_EQ(grey.at(y, x, 0), grey.at(y, x, 2));
    }
}

// What each seed holds (make_image_seeds.c), and so what reading it as
// 8-bit RGB has to convert.
TEST(ImageCodecs, ConversionsToEightBitRgbAreReported) {
  struct Expected {
    const char* name;
    bool sixteen_bits, grey, alpha, cmyk;
  };
  const Expected seeds[] = {
      {"rgb.png", false, false, false, false},         {"rgb-interlaced.png", false, false, false, false},
      {"rgba.png", false, false, true, false},         {"grey.png", false, true, false, false},
      {"grey-alpha.png", false, true, true, false},    {"grey-1bit.png", false, true, false, false},
      {"palette-trns.png", false, false, true, false},  // a palette with transparency
      {"rgb-16bit.png", true, false, false, false},    {"rgba-16bit-interlaced.png", true, false, true, false},
      {"baseline.jpg", false, false, false, false},    {"progressive.jpg", false, false, false, false},
      {"grey.jpg", false, true, false, false},         {"grey-progressive.jpg", false, true, false, false},
      {"cmyk.jpg", false, false, false, true},
  };
  for (const Expected& seed : seeds) {
    Image image;
    std::string reason;
    data::ImageConversions conversions;
    ASSERT_TRUE(data::try_read_image(kSeeds + seed.name, image, reason, data::kDefaultMaxImagePixels, &conversions))
        << reason;
    EXPECT_EQ(conversions.reduced_from_16_bits, seed.sixteen_bits) << seed.name;
    EXPECT_EQ(conversions.grey_expanded, seed.grey) << seed.name;
    EXPECT_EQ(conversions.alpha_dropped, seed.alpha) << seed.name;
    EXPECT_EQ(conversions.cmyk_converted, seed.cmyk) << seed.name;
  }
}

std::size_t count_of(const std::string& text, const std::string& part) {
  std::size_t count = 0;
  for (std::size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++count;
  return count;
}

TEST(ImageCodecs, ReadImageWarnsNamingTheFileAndEachConversion) {
  testing::LogCapture log;
  data::read_image(kSeeds + "rgba-16bit-interlaced.png");
  EXPECT_NE(log.text().find("converting image '" + kSeeds +
                            "rgba-16bit-interlaced.png' to 8-bit RGB: 16-bit samples reduced to 8 bits (the high "
                            "byte kept); alpha channel (transparency) dropped, transparent pixels keep their stored "
                            "colour"),
            std::string::npos)
      << log.text();
  data::read_image(kSeeds + "grey.jpg");
  EXPECT_NE(log.text().find("converting image '" + kSeeds + "grey.jpg' to 8-bit RGB: greyscale copied to R, G and B"),
            std::string::npos)
      << log.text();
  data::read_image(kSeeds + "cmyk.jpg");
  EXPECT_NE(log.text().find("converting image '" + kSeeds + "cmyk.jpg' to 8-bit RGB: CMYK converted to RGB"),
            std::string::npos)
      << log.text();
  data::read_image(kSeeds + "rgb.png");
  data::read_image(kSeeds + "baseline.jpg");
  EXPECT_EQ(count_of(log.text(), "converting image"), 3u) << log.text();
}

TEST(ImageCodecs, ImageFolderWarnsOncePerConvertedFileHoweverOftenItIsDecoded) {
  ScratchFolder folder("conversions");
  for (const char* name : {"rgb.png", "grey.png", "rgba.png", "rgb-16bit.png", "baseline.jpg"})
    testing::write_bytes(folder / name, testing::read_bytes(kSeeds + name));
  testing::LogCapture log;
  data::ImageFolder images(folder.path(), /*cache_bytes=*/0);  // no cache: every load decodes again
  ASSERT_EQ(images.size(), 5u);
  for (int round = 0; round < 3; ++round)
    for (std::size_t i = 0; i < images.size(); ++i) ASSERT_NE(images.load(i), nullptr);
  const std::string text = log.text();
  EXPECT_EQ(count_of(text, "converting image"), 3u) << text;
  EXPECT_EQ(count_of(text, "converting image '" + (folder / "grey.png") + "' to 8-bit RGB: greyscale"), 1u) << text;
  EXPECT_EQ(count_of(text, "converting image '" + (folder / "rgba.png") + "' to 8-bit RGB: alpha"), 1u) << text;
  EXPECT_EQ(count_of(text, "converting image '" + (folder / "rgb-16bit.png") + "' to 8-bit RGB: 16-bit"), 1u) << text;
}

void expect_refused(const std::string& bytes, const std::string& fragment) {
  Image image;
  std::string reason;
  EXPECT_FALSE(data::decode_image(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(),
                                  data::kDefaultMaxImagePixels, image, reason));
  EXPECT_NE(reason.find(fragment), std::string::npos) << reason;
  EXPECT_TRUE(image.pixels.empty());
}

TEST(ImageCodecs, DamagedFilesAreRefusedWithTheDecodersReason) {
  const std::string jpeg = testing::read_bytes(kSeeds + "baseline.jpg");
  expect_refused(jpeg.substr(0, jpeg.size() / 2), "corrupt JPEG: Premature end of JPEG file");
  std::string scrambled = jpeg;
  for (std::size_t i = scrambled.size() / 2; i < scrambled.size() - 2; ++i) scrambled[i] = '\xFF';
  expect_refused(scrambled, "corrupt JPEG");
  const std::string png = testing::read_bytes(kSeeds + "rgb.png");
  expect_refused(png.substr(0, png.size() - 20), "corrupt PNG");
  expect_refused("GIF89a not supported", "not a PNG or JPEG file");
  expect_refused("", "the file is empty");
}

std::string big_endian(std::uint32_t value) {
  std::string bytes;
  for (int shift = 24; shift >= 0; shift -= 8) bytes += static_cast<char>((value >> shift) & 0xFF);
  return bytes;
}

// A PNG chunk: length, type, data, CRC-32 (ISO 3309, computed bit by bit).
std::string png_chunk(const std::string& type, const std::string& data) {
  const std::string body = type + data;
  std::uint32_t crc = 0xFFFFFFFFu;
  for (unsigned char byte : body) {
    crc ^= byte;
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
  }
  return big_endian(static_cast<std::uint32_t>(data.size())) + body + big_endian(crc ^ 0xFFFFFFFFu);
}

// The start of a PNG claiming width x height: signature, IHDR (8-bit RGB),
// and an empty IDAT, where the pixel data would begin.
std::string png_header(std::uint32_t width, std::uint32_t height) {
  return std::string("\x89PNG\r\n\x1A\n", 8) +
         png_chunk("IHDR", big_endian(width) + big_endian(height) + std::string("\x08\x02\x00\x00\x00", 5)) +
         png_chunk("IDAT", "");
}

TEST(ImageCodecs, HeaderClaimingTooManyPixelsIsRefusedBeforeDecoding) {
  expect_refused(png_header(100000, 100000),
                 "the image is 100000x100000 = 10000000000 pixels, more than the limit of 50000000 pixels");
  ScratchFolder folder("huge");
  testing::write_bytes(folder / "huge.png", png_header(100000, 100000));
  data::ImageSize size;
  std::string reason;
  EXPECT_FALSE(data::read_image_size(folder / "huge.png", size, reason));
  EXPECT_NE(reason.find("more than the limit of 50000000 pixels"), std::string::npos) << reason;
  // The header alone reads with a larger limit.
  EXPECT_TRUE(data::read_image_size(folder / "huge.png", size, reason, std::int64_t{1} << 40)) << reason;
  EXPECT_EQ(size.width, 100000);
}

TEST(ImageCodecs, ImageFolderSkipsImagesOverTheLimitNamingTheHint) {
  ScratchFolder folder("limit");
  data::write_png(folder / "small.png", testing::position_image(4, 4));
  data::write_png(folder / "large.png", testing::position_image(40, 30));
  testing::LogCapture log;
  data::ImageFolder images(folder.path(), data::ImageFolder::kDefaultCacheBytes, 1000, "raise it with --flag");
  ASSERT_EQ(images.size(), 1u);
  EXPECT_EQ(images.path(0), folder / "small.png");
  EXPECT_NE(log.text().find("the image is 40x30 = 1200 pixels, more than the limit of 1000 pixels (raise it with "
                            "--flag)"),
            std::string::npos)
      << log.text();
}

TEST(ImageCodecs, AnIccProfileSurvivesWritingAndReadingAPng) {
  ScratchFolder folder("icc-png");
  Image image = testing::position_image(kWidth, kHeight);
  image.icc_profile = testing::icc_profile("RGB ", 3000, 1);
  data::write_png(folder / "tagged.png", image);
  Image back = data::read_image(folder / "tagged.png");
  EXPECT_EQ(back.icc_profile, image.icc_profile);
  EXPECT_EQ(back.pixels, image.pixels);
  // A grey PNG carries a grey profile; an RGB profile does not describe it and is left out.
  Image grey = image;
  grey.icc_profile = testing::icc_profile("GRAY", 40, 2);
  data::write_png(folder / "grey.png", grey, data::PngColour::grey);
  EXPECT_EQ(data::read_image(folder / "grey.png").icc_profile, grey.icc_profile);
  data::write_png(folder / "mismatch.png", image, data::PngColour::grey);
  EXPECT_TRUE(data::read_image(folder / "mismatch.png").icc_profile.empty());
  // An untagged PNG reads with no profile.
  EXPECT_TRUE(decode("rgb.png").icc_profile.empty());
}

TEST(ImageCodecs, WritePngReportsTheSystemsReasonAndLeavesNoFile) {
  ScratchFolder folder("unwritable");
  testing::write_bytes(folder / "file", "x");
  try {
    data::write_png(folder / "file/x.png", testing::position_image(3, 3));
    FAIL() << "expected an IoError";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("Not a directory"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace plexus

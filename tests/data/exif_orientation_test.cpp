// EXIF orientation in JPEGs: a JPEG written (by libjpeg, here) from a known
// asymmetric image, with an APP1 Exif segment carrying orientation 1-8,
// decodes to the image the EXIF table says the viewer should see; its
// header reports the upright size; a truncated, garbage or non-EXIF APP1
// segment is ignored (the image decodes as stored), never a crash.
#include <gtest/gtest.h>

#include <cstdio>
// jpeglib.h needs FILE and size_t declared first.
#include <jpeglib.h>

#include <array>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "data/data_test_support.h"
#include "plexus/data/image.h"

namespace plexus {
namespace {

using data::Image;
using testing::ScratchFolder;

// The stored image: 3 x 2 blocks of 16 x 16 pixels, each a flat colour far
// from the others, so every rotation and flip puts a different colour in
// each corner.
constexpr int kBlock = 16, kColumns = 3, kRows = 2;
constexpr int kWidth = kColumns * kBlock, kHeight = kRows * kBlock;
const std::array<std::array<std::uint8_t, 3>, kColumns* kRows> kColours = {{
    {{230, 20, 20}},
    {{20, 230, 20}},
    {{20, 20, 230}},  // top row: red, green, blue
    {{230, 230, 20}},
    {{20, 230, 230}},
    {{230, 20, 230}},  // bottom row: yellow, cyan, magenta
}};

Image stored_image() {
  Image image(kWidth, kHeight);
  for (int y = 0; y < kHeight; ++y)
    for (int x = 0; x < kWidth; ++x)
      for (int c = 0; c < 3; ++c) image.at(y, x, c) = kColours[(y / kBlock) * kColumns + x / kBlock][c];
  return image;
}

// An APP1 payload: "Exif\0\0", then a TIFF block in the given byte order
// whose first image directory holds `entries` (tag, type, count, value).
struct Entry {
  std::uint16_t tag, type;
  std::uint32_t count, value;
};

std::string exif_payload(bool big_endian, const std::vector<Entry>& entries) {
  std::string out("Exif\0\0", 6);
  auto u16 = [&](std::uint32_t v) {
    if (big_endian) out += {static_cast<char>(v >> 8 & 0xFF), static_cast<char>(v & 0xFF)};
    else out += {static_cast<char>(v & 0xFF), static_cast<char>(v >> 8 & 0xFF)};
  };
  auto u32 = [&](std::uint32_t v) {
    if (big_endian) u16(v >> 16), u16(v & 0xFFFF);
    else u16(v & 0xFFFF), u16(v >> 16);
  };
  out += big_endian ? "MM" : "II";
  u16(42);
  u32(8);  // the directory follows the 8-byte TIFF header
  u16(static_cast<std::uint32_t>(entries.size()));
  for (const Entry& e : entries) {
    u16(e.tag);
    u16(e.type);
    u32(e.count);
    if (e.type == 3) u16(e.value), u16(0);  // a SHORT, left-aligned in the 4-byte field
    else u32(e.value);
  }
  u32(0);  // no next directory
  return out;
}

constexpr std::uint16_t kOrientation = 0x0112, kShort = 3, kLong = 4;

std::string orientation_payload(int orientation, bool big_endian = false) {
  // An ImageWidth entry first, so the reader has to walk the directory.
  return exif_payload(big_endian,
                      {{0x0100, kLong, 1, kWidth}, {kOrientation, kShort, 1, static_cast<std::uint32_t>(orientation)}});
}

// The JPEG of stored_image() at quality 95 without chroma subsampling, with
// an APP1 segment holding `app1` when it is not empty, and `icc` as APP2
// ICC_PROFILE segments when it is not empty.
std::string jpeg_with_app1(const std::string& app1, const std::vector<std::uint8_t>& icc = {}) {
  jpeg_compress_struct info{};
  jpeg_error_mgr error{};
  info.err = jpeg_std_error(&error);
  jpeg_create_compress(&info);
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&info, &buffer, &size);
  info.image_width = kWidth;
  info.image_height = kHeight;
  info.input_components = 3;
  info.in_color_space = JCS_RGB;
  jpeg_set_defaults(&info);
  jpeg_set_quality(&info, 95, TRUE);
  for (int c = 0; c < 3; ++c) info.comp_info[c].h_samp_factor = info.comp_info[c].v_samp_factor = 1;
  jpeg_start_compress(&info, TRUE);
  if (!app1.empty())
    jpeg_write_marker(&info, JPEG_APP0 + 1, reinterpret_cast<const JOCTET*>(app1.data()),
                      static_cast<unsigned>(app1.size()));
  if (!icc.empty()) jpeg_write_icc_profile(&info, icc.data(), static_cast<unsigned>(icc.size()));
  Image image = stored_image();
  while (info.next_scanline < info.image_height) {
    JSAMPROW row = &image.pixels[static_cast<std::size_t>(info.next_scanline) * kWidth * 3];
    jpeg_write_scanlines(&info, &row, 1);
  }
  jpeg_finish_compress(&info);
  jpeg_destroy_compress(&info);
  std::string bytes(reinterpret_cast<const char*>(buffer), size);
  std::free(buffer);
  return bytes;
}

Image decode(const std::string& jpeg) {
  Image image;
  std::string reason;
  EXPECT_TRUE(data::decode_image(reinterpret_cast<const unsigned char*>(jpeg.data()), jpeg.size(),
                                 data::kDefaultMaxImagePixels, image, reason))
      << reason;
  return image;
}

// Where the EXIF table puts the stored pixel (r, c) for the viewer, from the
// edges that the stored row 0 and column 0 are shown along:
//   1 row 0 top,    column 0 left      5 row 0 left,   column 0 top
//   2 row 0 top,    column 0 right     6 row 0 right,  column 0 top
//   3 row 0 bottom, column 0 right     7 row 0 right,  column 0 bottom
//   4 row 0 bottom, column 0 left      8 row 0 left,   column 0 bottom
enum Edge { top, bottom, left, right };
struct Placement {
  Edge row0, column0;
};
const Placement kTable[9] = {{top, left}, {top, left},  {top, right},    {bottom, right}, {bottom, left},
                             {left, top}, {right, top}, {right, bottom}, {left, bottom}};

void shown_at(int orientation, int r, int c, int& y, int& x) {
  const Placement p = kTable[orientation];
  if (p.row0 == top || p.row0 == bottom) {  // stored rows stay rows
    y = p.row0 == top ? r : kHeight - 1 - r;
    x = p.column0 == left ? c : kWidth - 1 - c;
  } else {  // stored rows become columns
    x = p.row0 == left ? r : kHeight - 1 - r;
    y = p.column0 == top ? c : kWidth - 1 - c;
  }
}

// Every block's colour, sampled 3 pixels inside each of its corners (away
// from JPEG's blurring at block edges), is where the table puts it.
void expect_shown_as(const Image& image, int orientation, const std::string& what) {
  const bool turned = orientation >= 5;
  ASSERT_EQ(image.width, turned ? kHeight : kWidth) << what;
  ASSERT_EQ(image.height, turned ? kWidth : kHeight) << what;
  for (int block = 0; block < kColumns * kRows; ++block)
    for (int corner = 0; corner < 4; ++corner) {
      const int r = (block / kColumns) * kBlock + (corner / 2 ? kBlock - 4 : 3);
      const int c = (block % kColumns) * kBlock + (corner % 2 ? kBlock - 4 : 3);
      int y = 0, x = 0;
      shown_at(orientation, r, c, y, x);
      for (int channel = 0; channel < 3; ++channel)
        ASSERT_NEAR(image.at(y, x, channel), kColours[block][channel], 12)
            << what << ": stored (" << r << ", " << c << ") should show at (" << y << ", " << x << ")";
    }
}

TEST(ExifOrientation, EachOrientationIsShownAsTheExifTableSays) {
  for (int orientation = 1; orientation <= 8; ++orientation)
    for (bool big_endian : {false, true}) {
      const std::string what =
          "orientation " + std::to_string(orientation) + (big_endian ? " (big-endian)" : " (little-endian)");
      expect_shown_as(decode(jpeg_with_app1(orientation_payload(orientation, big_endian))), orientation, what);
    }
}

TEST(ExifOrientation, FilesAndHeadersReportTheUprightSize) {
  ScratchFolder folder("exif");
  for (int orientation : {1, 3, 6, 8}) {
    const std::string path = folder / ("o" + std::to_string(orientation) + ".jpg");
    testing::write_bytes(path, jpeg_with_app1(orientation_payload(orientation)));
    data::ImageSize size;
    std::string reason;
    ASSERT_TRUE(data::read_image_size(path, size, reason)) << reason;
    const bool turned = orientation >= 5;
    EXPECT_EQ(size.width, turned ? kHeight : kWidth) << orientation;
    EXPECT_EQ(size.height, turned ? kWidth : kHeight) << orientation;
    expect_shown_as(data::read_image(path), orientation, path);
  }
}

// A profile over 65,519 bytes takes several APP2 segments; turning the image
// upright keeps it.
TEST(ExifOrientation, AnIccProfileInSeveralSegmentsSurvivesTurningUpright) {
  const std::vector<std::uint8_t> icc = testing::icc_profile("RGB ", 150000, 3);
  for (int orientation : {1, 6}) {
    const Image image = decode(jpeg_with_app1(orientation_payload(orientation), icc));
    expect_shown_as(image, orientation, "with an ICC profile");
    EXPECT_EQ(image.icc_profile, icc) << "orientation " << orientation;
  }
  EXPECT_TRUE(decode(jpeg_with_app1("")).icc_profile.empty());
}

TEST(ExifOrientation, NoExifOrAnotherApp1SegmentLeavesTheImageAsStored) {
  expect_shown_as(decode(jpeg_with_app1("")), 1, "no APP1");
  const std::string xmp = std::string("http://ns.adobe.com/xap/1.0/\0", 29) + "<x:xmpmeta/>";
  expect_shown_as(decode(jpeg_with_app1(xmp)), 1, "XMP");
  expect_shown_as(decode(jpeg_with_app1(exif_payload(false, {{0x0100, kLong, 1, kWidth}}))), 1, "no orientation tag");
}

TEST(ExifOrientation, MalformedExifIsIgnored) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"orientation 0", orientation_payload(0)},
      {"orientation 9", orientation_payload(9)},
      {"orientation 65535", orientation_payload(65535)},
      {"orientation as a LONG", exif_payload(false, {{kOrientation, kLong, 1, 6}})},
      {"orientation with count 2", exif_payload(false, {{kOrientation, kShort, 2, 6}})},
      {"bad byte order",
       [] {
         std::string p = orientation_payload(6);
         p[6] = 'X';
         return p;
       }()},
      {"bad magic number",
       [] {
         std::string p = orientation_payload(6);
         p[8] = 43;
         return p;
       }()},
      {"directory offset past the end",
       [] {
         std::string p = orientation_payload(6);
         p[10] = '\xF0', p[11] = '\xFF', p[12] = '\xFF', p[13] = '\xFF';
         return p;
       }()},
      {"65535 entries claimed",
       [] {
         std::string p = orientation_payload(6);
         p[14] = '\xFF', p[15] = '\xFF';
         p.resize(p.size() - 16);  // the orientation entry and the next-directory offset are cut
         return p;
       }()},
      {"garbage", std::string("Exif\0\0", 6) + std::string(200, '\xA5')},
  };
  for (const auto& [what, payload] : cases) expect_shown_as(decode(jpeg_with_app1(payload)), 1, what);
}

TEST(ExifOrientation, EveryTruncationOfTheSegmentIsIgnoredSafely) {
  // Orientation 6 counts only when its whole entry is present: the tag,
  // type and count (8 bytes) and the SHORT value (2 bytes) after them.
  const std::string full = orientation_payload(6);
  const std::size_t entry_end = 6 + 8 + 2 + 2 * 12 - 2;
  for (std::size_t length = 1; length <= full.size(); ++length) {
    const int expected = length >= entry_end ? 6 : 1;
    expect_shown_as(decode(jpeg_with_app1(full.substr(0, length))), expected,
                    "the first " + std::to_string(length) + " bytes");
  }
}

}  // namespace
}  // namespace plexus

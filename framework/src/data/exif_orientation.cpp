#include "exif_orientation.h"

#include <cstdint>
#include <cstring>

namespace plexus::data::codecs {

namespace {

constexpr std::uint16_t kOrientationTag = 0x0112;
constexpr std::uint16_t kShortType = 3;  // TIFF SHORT: an unsigned 16-bit value
constexpr std::size_t kEntryBytes = 12;  // tag, type, count, value or offset

// The TIFF block after "Exif\0\0": byte order "II" (little-endian) or "MM"
// (big-endian), 42, the offset of the first image directory; offsets count
// from the start of this block.
class TiffReader {
 public:
  TiffReader(const unsigned char* bytes, std::size_t size) : bytes_(bytes), size_(size) {}

  bool read_byte_order() {
    if (size_ < 2) return false;
    if (bytes_[0] == 'I' && bytes_[1] == 'I') little_endian_ = true;
    else if (bytes_[0] == 'M' && bytes_[1] == 'M') little_endian_ = false;
    else return false;
    return true;
  }
  // false when [offset, offset + width) is not inside the block.
  bool u16(std::size_t offset, std::uint16_t& value) const {
    if (offset > size_ || size_ - offset < 2) return false;
    const unsigned char* p = bytes_ + offset;
    value =
        little_endian_ ? static_cast<std::uint16_t>(p[0] | p[1] << 8) : static_cast<std::uint16_t>(p[0] << 8 | p[1]);
    return true;
  }
  bool u32(std::size_t offset, std::uint32_t& value) const {
    std::uint16_t first = 0, second = 0;
    if (offset > size_ || !u16(offset, first) || !u16(offset + 2, second)) return false;
    value = little_endian_ ? (std::uint32_t{second} << 16 | first) : (std::uint32_t{first} << 16 | second);
    return true;
  }

 private:
  const unsigned char* bytes_;
  std::size_t size_;
  bool little_endian_ = true;
};

}  // namespace

int exif_orientation(const unsigned char* segment, std::size_t size) {
  static const unsigned char kExifHeader[6] = {'E', 'x', 'i', 'f', 0, 0};
  if (!segment || size < sizeof kExifHeader || std::memcmp(segment, kExifHeader, sizeof kExifHeader) != 0) return 1;
  TiffReader tiff(segment + sizeof kExifHeader, size - sizeof kExifHeader);
  std::uint16_t magic = 0, entries = 0;
  std::uint32_t directory = 0;
  if (!tiff.read_byte_order() || !tiff.u16(2, magic) || magic != 42 || !tiff.u32(4, directory) ||
      !tiff.u16(directory, entries))
    return 1;
  for (std::uint32_t i = 0; i < entries; ++i) {
    const std::size_t entry = std::size_t{directory} + 2 + i * kEntryBytes;
    std::uint16_t tag = 0, type = 0, value = 0;
    std::uint32_t count = 0;
    if (!tiff.u16(entry, tag) || !tiff.u16(entry + 2, type) || !tiff.u32(entry + 4, count) ||
        !tiff.u16(entry + 8, value))
      return 1;
    if (tag != kOrientationTag) continue;
    // A single SHORT sits in the first two bytes of the value field.
    return type == kShortType && count == 1 && value >= 1 && value <= 8 ? value : 1;
  }
  return 1;
}

bool orientation_swaps_sides(int orientation) { return orientation >= 5 && orientation <= 8; }

Image apply_orientation(const Image& stored, int orientation) {
  if (orientation < 2 || orientation > 8) return stored;
  const int w = stored.width, h = stored.height;
  const bool swap = orientation_swaps_sides(orientation);
  Image upright(swap ? h : w, swap ? w : h);
  upright.icc_profile = stored.icc_profile;
  for (int y = 0; y < upright.height; ++y)
    for (int x = 0; x < upright.width; ++x) {
      int sy = y, sx = x;
      switch (orientation) {
        case 2:
          sx = w - 1 - x;
          break;
        case 3:
          sy = h - 1 - y, sx = w - 1 - x;
          break;
        case 4:
          sy = h - 1 - y;
          break;
        case 5:
          sy = x, sx = y;
          break;
        case 6:
          sy = h - 1 - x, sx = y;
          break;
        case 7:
          sy = h - 1 - x, sx = w - 1 - y;
          break;
        case 8:
          sy = x, sx = w - 1 - y;
          break;
      }
      for (int c = 0; c < 3; ++c) upright.at(y, x, c) = stored.at(sy, sx, c);
    }
  return upright;
}

}  // namespace plexus::data::codecs

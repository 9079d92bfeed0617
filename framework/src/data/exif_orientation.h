#pragma once
// The EXIF orientation of a JPEG (tag 0x0112 of the first image directory
// in its APP1 "Exif" segment), and the rotation or flip that shows the
// stored pixels the way up the camera meant. Phones store pixels as the
// sensor read them and record the camera's rotation here.
#include <cstddef>

#include "plexus/data/image.h"

namespace plexus::data::codecs {

// The orientation 1-8 recorded in an APP1 segment's payload (the bytes after
// the marker's length, starting "Exif\0\0"), or 1 (as stored) when the
// segment is not EXIF, has no orientation tag, or is malformed. Every read
// is bounds-checked: the segment comes from an untrusted file.
int exif_orientation(const unsigned char* segment, std::size_t size);

// True for orientations 5-8, which swap the width and the height.
bool orientation_swaps_sides(int orientation);

// `stored` shown upright. With W x H the stored size, the upright pixel
// (y, x) is the stored pixel
//   1 (y, x)            2 (y, W-1-x)         3 (H-1-y, W-1-x)     4 (H-1-y, x)
//   5 (x, y)            6 (H-1-x, y)         7 (H-1-x, W-1-y)     8 (x, W-1-y)
// (5-8 produce an H x W image). Any other value returns `stored` unchanged.
Image apply_orientation(const Image& stored, int orientation);

}  // namespace plexus::data::codecs

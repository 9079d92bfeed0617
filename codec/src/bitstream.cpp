#include "plexus/codec/bitstream.h"

#include <cstdio>

#include "plexus/checksum.h"
#include "plexus/error.h"

namespace plexus::codec {

namespace {

constexpr char kMagic[4] = {'P', 'X', 'A', 'E'};

void put(std::vector<std::uint8_t>& out, std::uint64_t value, int bytes) {
  for (int k = 0; k < bytes; ++k) out.push_back(static_cast<std::uint8_t>(value >> (8 * k)));
}

std::uint64_t get(const std::uint8_t* at, int bytes) {
  std::uint64_t value = 0;
  for (int k = 0; k < bytes; ++k) value |= static_cast<std::uint64_t>(at[k]) << (8 * k);
  return value;
}

std::uint32_t ceil_div(std::uint32_t a, std::uint32_t b) { return a / b + (a % b != 0); }

std::string shape_text(std::uint32_t channels, std::uint32_t height, std::uint32_t width) {
  return "[" + std::to_string(channels) + ", " + std::to_string(height) + ", " + std::to_string(width) + "]";
}

}  // namespace

const char* model_kind_name(ModelKind kind) {
  switch (kind) {
    case ModelKind::factorized:
      return "factorized-prior";
    case ModelKind::hyperprior:
      return "scale-hyperprior";
    case ModelKind::mean_scale_hyperprior:
      return "mean-scale-hyperprior";
    case ModelKind::channel_conditional:
      return "channel-conditional";
    case ModelKind::checkerboard:
      return "checkerboard";
    case ModelKind::autoregressive:
      return "autoregressive";
    case ModelKind::grouped_checkerboard:
      return "grouped-checkerboard";
  }
  return "unknown";
}

bool has_hyper_latent(ModelKind kind) { return kind != ModelKind::factorized; }

std::uint16_t format_version(ModelKind kind) {
  switch (kind) {
    case ModelKind::factorized:
      return 1;
    case ModelKind::hyperprior:
      return 2;
    case ModelKind::mean_scale_hyperprior:
      return 3;
    case ModelKind::channel_conditional:
      return 4;
    case ModelKind::checkerboard:
    case ModelKind::autoregressive:
    case ModelKind::grouped_checkerboard:
      return kSectionedVersion;
  }
  return 0;
}

std::string fingerprint_text(std::uint64_t fingerprint) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(fingerprint));
  return text;
}

std::vector<std::uint8_t> write_bitstream(const BitstreamHeader& header, const std::vector<std::uint8_t>& stream) {
  const bool hyperprior = has_hyper_latent(header.kind);
  std::vector<std::uint8_t> out(kMagic, kMagic + 4);
  put(out, format_version(header.kind), 2);
  put(out, (header.grey ? kFlagGrey : 0) | (header.variable_rate ? kFlagRateLevel : 0), 2);
  put(out, header.fingerprint, 8);
  put(out, header.width, 4);
  put(out, header.height, 4);
  put(out, header.channels, 4);
  put(out, header.latent_height, 4);
  put(out, header.latent_width, 4);
  if (hyperprior) {
    put(out, static_cast<std::uint32_t>(header.kind), 4);
    put(out, header.hyper_channels, 4);
    put(out, header.hyper_height, 4);
    put(out, header.hyper_width, 4);
  }
  if (header.variable_rate) put(out, header.rate_level, 4);
  put(out, stream.size(), 4);
  out.insert(out.end(), stream.begin(), stream.end());
  put(out, plexus::crc32(out.data(), out.size()), 4);
  return out;
}

std::vector<std::uint8_t> write_sectioned_bitstream(const BitstreamHeader& header,
                                                    const std::vector<CodedStream>& streams) {
  std::vector<std::uint8_t> out(kMagic, kMagic + 4);
  put(out, kSectionedVersion, 2);
  put(out, (header.grey ? kFlagGrey : 0) | (header.variable_rate ? kFlagRateLevel : 0), 2);
  put(out, header.fingerprint, 8);
  put(out, header.codec_fingerprint, 8);
  put(out, header.width, 4);
  put(out, header.height, 4);
  put(out, header.variable_rate ? header.rate_level : 0, 4);
  const std::size_t icc = header.icc_profile.size();
  if (icc != 0 && !icc_profile_size_fits(icc))
    throw ConfigError("an ICC profile of " + std::to_string(icc) + " bytes (a file holds one of " +
                      std::to_string(kMinIccProfileBytes) + " to " + std::to_string(kMaxIccProfileBytes) + " bytes)");
  put(out, streams.size() + (icc != 0 ? 1 : 0), 2);
  for (const CodedStream& stream : streams) {
    put(out, kSectionCodedStream, 2);
    put(out, kSectionRequired, 2);
    put(out, kStreamSectionHeaderBytes + stream.bytes.size(), 4);
    put(out, stream.channels, 4);
    put(out, stream.height, 4);
    put(out, stream.width, 4);
    out.insert(out.end(), stream.bytes.begin(), stream.bytes.end());
  }
  if (icc != 0) {
    put(out, kSectionIccProfile, 2);
    put(out, 0, 2);  // optional: a reader without colour management may skip it
    put(out, icc, 4);
    out.insert(out.end(), header.icc_profile.begin(), header.icc_profile.end());
  }
  put(out, plexus::crc32(out.data(), out.size()), 4);
  return out;
}

namespace {

void check_checksum(const std::uint8_t* bytes, std::size_t size) {
  const std::uint32_t stored_crc = static_cast<std::uint32_t>(get(bytes + size - 4, 4));
  const std::uint32_t actual_crc = plexus::crc32(bytes, size - 4);
  if (stored_crc != actual_crc)
    throw IoError("checksum mismatch: the file is corrupt (CRC-32 " + fingerprint_text(actual_crc).substr(8) +
                  ", stored " + fingerprint_text(stored_crc).substr(8) + ")");
}

void check_flags(std::uint64_t flags) {
  if ((flags & ~std::uint64_t(kFlagGrey | kFlagRateLevel)) != 0)
    throw IoError("unknown flags " + std::to_string(flags) +
                  " (this plexus-ae knows only bit 0, a grey image, and bit 1, a rate level)");
}

// Version 5: the header, then the sections, walked within [bytes, bytes + size).
Bitstream read_sectioned(const std::uint8_t* bytes, std::size_t size) {
  constexpr std::size_t overhead = kSectionedHeaderBytes + 4;
  if (size < overhead)
    throw IoError("truncated: " + std::to_string(size) + " bytes, shorter than the " + std::to_string(overhead) +
                  "-byte header and checksum of format version " + std::to_string(kSectionedVersion));
  const std::size_t count = static_cast<std::size_t>(get(bytes + 36, 2));
  if (count < 1 || count > kMaxSections)
    throw IoError("the header announces " + std::to_string(count) + " sections (1 to " + std::to_string(kMaxSections) +
                  " are allowed)");
  std::uint64_t end = kSectionedHeaderBytes;
  std::vector<std::uint64_t> starts;
  for (std::size_t k = 0; k < count; ++k) {
    if (end + kSectionHeaderBytes + 4 > size)
      throw IoError("truncated: section " + std::to_string(k) + " of " + std::to_string(count) +
                    " would start at byte " + std::to_string(end) + ", but the file has " + std::to_string(size) +
                    " bytes with its checksum");
    starts.push_back(end);
    end += kSectionHeaderBytes + get(bytes + end + 4, 4);
  }
  const std::uint64_t expected_size = end + 4;
  if (size < expected_size)
    throw IoError("truncated: the sections announce " + std::to_string(expected_size) +
                  " bytes in all, but the file has " + std::to_string(size));
  if (size > expected_size)
    throw IoError("extended: " + std::to_string(size - expected_size) +
                  " unexpected byte(s) after the checksum (the sections announce " + std::to_string(expected_size) +
                  " bytes in all)");
  check_checksum(bytes, size);
  const auto flags = get(bytes + 6, 2);
  check_flags(flags);
  Bitstream result;
  BitstreamHeader& h = result.header;
  h.version = kSectionedVersion;
  h.grey = (flags & kFlagGrey) != 0;
  h.variable_rate = (flags & kFlagRateLevel) != 0;
  h.fingerprint = get(bytes + 8, 8);
  h.codec_fingerprint = get(bytes + 16, 8);
  h.width = static_cast<std::uint32_t>(get(bytes + 24, 4));
  h.height = static_cast<std::uint32_t>(get(bytes + 28, 4));
  h.rate_level = static_cast<std::uint32_t>(get(bytes + 32, 4));
  if (!h.variable_rate && h.rate_level != 0)
    throw IoError("a rate level of " + std::to_string(h.rate_level) + " without flag bit 1 (the field must be 0)");
  for (std::size_t k = 0; k < count; ++k) {
    const std::uint8_t* at = bytes + starts[k];
    const auto type = static_cast<std::uint16_t>(get(at, 2));
    const auto section_flags = static_cast<std::uint16_t>(get(at + 2, 2));
    const std::size_t length = static_cast<std::size_t>(get(at + 4, 4));
    const std::string which = "section " + std::to_string(k) + " (type " + std::to_string(type) + ")";
    if ((section_flags & ~kSectionRequired) != 0)
      throw IoError(which + " has unknown section flags " + std::to_string(section_flags) +
                    " (this plexus-ae knows only bit 0, required)");
    if (type == kSectionIccProfile) {
      if (!h.icc_profile.empty()) throw IoError(which + " is a second ICC profile (a file holds one at most)");
      if (!icc_profile_size_fits(length))
        throw IoError(which + ", an ICC profile, has " + std::to_string(length) + " bytes (a profile has " +
                      std::to_string(kMinIccProfileBytes) + " to " + std::to_string(kMaxIccProfileBytes) + ")");
      h.icc_profile.assign(at + kSectionHeaderBytes, at + kSectionHeaderBytes + length);
      continue;
    }
    if (type != kSectionCodedStream) {
      if (section_flags & kSectionRequired)
        throw IoError(which + " is marked required, but this plexus-ae does not know its type (a newer plexus-ae "
                              "wrote it)");
      ++result.skipped_sections;
      continue;
    }
    if (!(section_flags & kSectionRequired))
      throw IoError(which + ", a coded stream, is not marked required (every coded stream is)");
    if (length < kStreamSectionHeaderBytes)
      throw IoError(which + ", a coded stream, has " + std::to_string(length) + " bytes, fewer than its " +
                    std::to_string(kStreamSectionHeaderBytes) + "-byte shape");
    StreamView stream;
    stream.channels = static_cast<std::uint32_t>(get(at + 8, 4));
    stream.height = static_cast<std::uint32_t>(get(at + 12, 4));
    stream.width = static_cast<std::uint32_t>(get(at + 16, 4));
    stream.data = at + kSectionHeaderBytes + kStreamSectionHeaderBytes;
    stream.size = length - kStreamSectionHeaderBytes;
    result.streams.push_back(stream);
  }
  if (result.streams.empty()) throw IoError("no coded stream among its " + std::to_string(count) + " sections");
  return result;
}

}  // namespace

namespace {

void check_magic(const std::uint8_t* bytes, std::size_t size) {
  if (size < 6 || get(bytes, 4) != get(reinterpret_cast<const std::uint8_t*>(kMagic), 4))
    throw IoError("not a plexus-ae compressed image (it does not start with \"PXAE\")");
}

}  // namespace

BitstreamHead read_bitstream_head(const std::uint8_t* bytes, std::size_t size) {
  check_magic(bytes, size);
  if (size < 16) throw IoError("truncated: " + std::to_string(size) + " bytes, shorter than the model fingerprint");
  BitstreamHead head;
  head.version = static_cast<std::uint16_t>(get(bytes + 4, 2));
  head.fingerprint = get(bytes + 8, 8);
  const std::size_t size_at = head.version >= kSectionedVersion ? 24 : 16;  // width, then height
  if (size >= size_at + 8) {
    head.width = static_cast<std::uint32_t>(get(bytes + size_at, 4));
    head.height = static_cast<std::uint32_t>(get(bytes + size_at + 4, 4));
  }
  return head;
}

Bitstream read_bitstream(const std::uint8_t* bytes, std::size_t size) {
  check_magic(bytes, size);
  const auto version = static_cast<std::uint16_t>(get(bytes + 4, 2));
  if (version < 1 || version > kBitstreamVersion)
    throw IoError("format version " + std::to_string(version) + ", but this plexus-ae reads only versions 1 to " +
                  std::to_string(kBitstreamVersion) +
                  (version > kBitstreamVersion ? " (a newer plexus-ae wrote it)" : ""));
  if (version == kSectionedVersion) return read_sectioned(bytes, size);
  const auto flags = size >= 8 ? get(bytes + 6, 2) : 0;
  const bool variable_rate = (flags & kFlagRateLevel) != 0;
  const std::size_t header_bytes =
      (version == 1 ? kBitstreamHeaderBytes : kHyperpriorHeaderBytes) + (variable_rate ? 4 : 0);
  const std::size_t overhead = header_bytes + 4;
  if (size < overhead)
    throw IoError("truncated: " + std::to_string(size) + " bytes, shorter than the " + std::to_string(overhead) +
                  "-byte header and checksum of format version " + std::to_string(version));
  const std::uint64_t stream_size = get(bytes + header_bytes - 4, 4);
  const std::uint64_t expected_size = overhead + stream_size;
  if (size < expected_size)
    throw IoError("truncated: the header announces a " + std::to_string(stream_size) + "-byte coded stream, so " +
                  std::to_string(expected_size) + " bytes in all, but the file has " + std::to_string(size));
  if (size > expected_size)
    throw IoError("extended: " + std::to_string(size - expected_size) +
                  " unexpected byte(s) after the checksum (the header announces " + std::to_string(expected_size) +
                  " bytes in all)");
  check_checksum(bytes, size);
  check_flags(flags);

  Bitstream result;
  BitstreamHeader& h = result.header;
  h.version = version;
  h.grey = (flags & kFlagGrey) != 0;
  h.variable_rate = variable_rate;
  if (variable_rate) h.rate_level = static_cast<std::uint32_t>(get(bytes + header_bytes - 8, 4));
  if (version >= 2) {
    // Version 2 holds kind 2, version 3 kind 3, version 4 kind 4: the same layout, different symbols.
    const std::uint64_t kind = get(bytes + 36, 4);
    if (kind != version)
      throw IoError("model kind " + std::to_string(kind) + " in a format-version-" + std::to_string(version) +
                    " file (version 2 holds kind 2, the scale hyperprior; version 3 kind 3, the mean-scale "
                    "hyperprior; version 4 kind 4, the channel-conditional model)");
    h.kind = static_cast<ModelKind>(kind);
    h.hyper_channels = static_cast<std::uint32_t>(get(bytes + 40, 4));
    h.hyper_height = static_cast<std::uint32_t>(get(bytes + 44, 4));
    h.hyper_width = static_cast<std::uint32_t>(get(bytes + 48, 4));
  }
  h.fingerprint = get(bytes + 8, 8);
  h.width = static_cast<std::uint32_t>(get(bytes + 16, 4));
  h.height = static_cast<std::uint32_t>(get(bytes + 20, 4));
  h.channels = static_cast<std::uint32_t>(get(bytes + 24, 4));
  h.latent_height = static_cast<std::uint32_t>(get(bytes + 28, 4));
  h.latent_width = static_cast<std::uint32_t>(get(bytes + 32, 4));
  StreamView stream;
  stream.data = bytes + header_bytes;
  stream.size = static_cast<std::size_t>(stream_size);
  result.streams.push_back(stream);
  return result;
}

Bitstream parse_bitstream(const std::uint8_t* bytes, std::size_t size, const BitstreamExpectation& expected) {
  Bitstream result = read_bitstream(bytes, size);
  BitstreamHeader& h = result.header;
  const bool variable_rate = h.variable_rate;
  const bool sectioned = h.version >= kSectionedVersion;
  if (sectioned && h.codec_fingerprint != expected.codec_fingerprint)
    throw IoError("it was coded with the codec section of fingerprint " + fingerprint_text(h.codec_fingerprint) +
                  ", but '" + expected.model + "' codes with " + fingerprint_text(expected.codec_fingerprint) +
                  " (a different tree of latent codecs); decompress it with --model set to the model that "
                  "compressed it");
  if (sectioned) h.kind = expected.kind;
  if (h.kind != expected.kind)
    throw IoError(std::string("a ") + model_kind_name(h.kind) + " file (format version " +
                  std::to_string(format_version(h.kind)) + "), but '" + expected.model + "' is a " +
                  model_kind_name(expected.kind) +
                  " model; decompress it with --model set to the model that compressed it");
  if (variable_rate != (expected.rate_levels > 0))
    throw IoError(variable_rate ? "it holds a rate level, but '" + expected.model +
                                      "' is a model of one rate; decompress it with --model set to the "
                                      "variable-rate model that compressed it"
                                : "it holds no rate level, but '" + expected.model +
                                      "' is a variable-rate model; decompress it with --model set to the model "
                                      "that compressed it");
  if (variable_rate && std::uint64_t(h.rate_level) > std::uint64_t(expected.rate_levels - 1) * kRateLevelOne)
    throw IoError("rate level " + std::to_string(h.rate_level / double(kRateLevelOne)) + " is out of range: '" +
                  expected.model + "' has levels 0 to " + std::to_string(expected.rate_levels - 1));
  if (h.fingerprint != expected.fingerprint)
    throw IoError("it was compressed with the model of fingerprint " + fingerprint_text(h.fingerprint) + ", but '" +
                  expected.model + "' has fingerprint " + fingerprint_text(expected.fingerprint) +
                  "; decompress it with --model set to the model that compressed it");
  if (h.width < 1 || h.height < 1 || h.width > kMaxImageSide || h.height > kMaxImageSide ||
      static_cast<std::uint64_t>(h.width) * h.height > expected.max_pixels)
    throw IoError("image size " + std::to_string(h.width) + "x" + std::to_string(h.height) +
                  " is out of range (each side 1.." + std::to_string(kMaxImageSide) + ", at most " +
                  std::to_string(expected.max_pixels) + " pixels)");
  const std::uint32_t strides_high = ceil_div(h.height, expected.stride);
  const std::uint32_t strides_wide = ceil_div(h.width, expected.stride);
  const std::uint32_t latent_height = strides_high * expected.latent_per_stride;
  const std::uint32_t latent_width = strides_wide * expected.latent_per_stride;
  const std::string image = std::to_string(h.width) + "x" + std::to_string(h.height) + " image";
  if (sectioned) {
    // The streams in coding order: the hyper-latent's, then the latent's (one per channel group).
    std::vector<StreamView> expected_streams;
    if (has_hyper_latent(h.kind)) expected_streams.push_back({expected.hyper_channels, strides_high, strides_wide});
    const std::vector<std::uint32_t> groups =
        expected.group_channels.empty() ? std::vector<std::uint32_t>{expected.channels} : expected.group_channels;
    for (std::uint32_t channels : groups) expected_streams.push_back({channels, latent_height, latent_width});
    if (result.streams.size() != expected_streams.size())
      throw IoError(std::to_string(result.streams.size()) + " coded stream(s), but '" + expected.model + "' codes " +
                    std::to_string(expected_streams.size()));
    for (std::size_t k = 0; k < expected_streams.size(); ++k) {
      const StreamView& got = result.streams[k];
      const StreamView& want = expected_streams[k];
      if (got.channels != want.channels || got.height != want.height || got.width != want.width)
        throw IoError("coded stream " + std::to_string(k) + " has shape " +
                      shape_text(got.channels, got.height, got.width) + ", which does not fit a " + image +
                      " under this model, which needs " + shape_text(want.channels, want.height, want.width));
    }
    h.channels = expected.channels;
    h.latent_height = latent_height;
    h.latent_width = latent_width;
    if (has_hyper_latent(h.kind)) {
      h.hyper_channels = expected.hyper_channels;
      h.hyper_height = strides_high;
      h.hyper_width = strides_wide;
    }
    return result;
  }
  if (h.channels != expected.channels || h.latent_height != latent_height || h.latent_width != latent_width)
    throw IoError("latent shape " + shape_text(h.channels, h.latent_height, h.latent_width) + " does not fit a " +
                  image + " under this model, which needs " +
                  shape_text(expected.channels, latent_height, latent_width));
  if (has_hyper_latent(h.kind) &&
      (h.hyper_channels != expected.hyper_channels || h.hyper_height != strides_high || h.hyper_width != strides_wide))
    throw IoError("hyper-latent shape " + shape_text(h.hyper_channels, h.hyper_height, h.hyper_width) +
                  " does not fit a " + image + " under this model, which needs " +
                  shape_text(expected.hyper_channels, strides_high, strides_wide));
  return result;
}

}  // namespace plexus::codec

#pragma once
// The compressed-image file of plexus-ae (docs/bitstream.md is the
// reference). All integers little-endian. Version 1, a factorized-prior model:
//   offset  size  field
//   0       4     magic "PXAE"
//   4       2     format version (1)
//   6       2     flags: bit 0 (kFlagGrey) the image was grey; other bits 0 (reserved)
//   8       8     model fingerprint (CodecModel::fingerprint)
//   16      4     image width  (pixels)
//   20      4     image height (pixels)
//   24      4     latent channels
//   28      4     latent height
//   32      4     latent width
//   36      4     S, the length of the coded stream in bytes
//   40      S     the rANS stream of every latent symbol, channel by channel, rows top to bottom
//   40 + S  4     CRC-32 of bytes [0, 40 + S)
// Version 2 says which kind of model wrote it and adds the hyper-latent:
//   0..36         as version 1 (version 2)
//   36      4     model kind (ModelKind; 2, the scale hyperprior)
//   40      4     hyper-latent channels
//   44      4     hyper-latent height
//   48      4     hyper-latent width
//   52      4     S
//   56      S     the rANS stream: the hyper-latent's symbols, then the latent's
//   56 + S  4     CRC-32 of bytes [0, 56 + S)
// Version 3 is version 2's layout for a mean-scale hyperprior (model kind 3):
// the latent's symbols are round(y - mean), each mean from the integer
// network, so the decoder reconstructs y_hat = symbol + mean.
// Version 4 is version 2's layout for a channel-conditional model (model
// kind 4): the latent is coded in slices of channels, each slice's symbols
// round(y - mean) with means and scales computed by the integer network from
// the hyper-latent and the slices decoded before it; the stream's order
// (channel by channel) is the same.
// Flag bit 1 (kFlagRateLevel): a variable-rate model wrote the file, and a
// 4-byte field, the rate level in units of 2^-16, comes right before S (at
// offset 36 in version 1, 52 in versions 2 to 4), moving S, the stream and
// the checksum 4 bytes on. Models of one rate never set it, so their files
// are unchanged.
// Version 5, sectioned, for every model: a header, the fingerprint of the
// model's codec section (its tree of latent codecs), then sections, one per
// coded stream, each its own rANS stream:
//   0       4     magic "PXAE"
//   4       2     format version (5)
//   6       2     flags (as above; bit 1 says the rate level field is used)
//   8       8     model fingerprint
//   16      8     codec fingerprint (codec_fingerprint of the codec section)
//   24      4     image width
//   28      4     image height
//   32      4     rate level, units of 2^-16 (0 without flag bit 1)
//   36      2     N, the number of sections (1..kMaxSections)
//   38            N sections, each: 2 type, 2 section flags (bit 0: required),
//                 4 payload length L, L payload bytes
//   end - 4 4     CRC-32 of every byte before it
// A coded-stream section (type 1, required) holds 4 channels, 4 height,
// 4 width, then the rANS stream; the streams come in the codec tree's coding
// order: a factorized model's latent; a hyperprior's hyper-latent, then its
// latent, or a channel-grouped latent's groups one section each, or a
// checkerboard latent's anchors, then its other positions, a grouped
// checkerboard latent's group 0 anchors, group 0 others, group 1 anchors, ...,
// or an autoregressive latent in its wavefront order (docs/bitstream.md). A reader
// skips a section of a type it does not know unless bit 0 says it is
// required, and then refuses the file (room for metadata such as an ICC profile).
// plexus-ae writes version 5; CodecModel::set_format_version writes the
// version of the model's kind instead (1 for factorized-prior models, 2 for
// scale-hyperprior, 3 for mean-scale and 4 for channel-conditional ones), the
// bytes earlier plexus-ae wrote.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace plexus::codec {

inline constexpr std::uint16_t kBitstreamVersion = 5;     // the newest version this plexus-ae reads (and writes)
inline constexpr std::uint16_t kSectionedVersion = 5;     // the first sectioned version
inline constexpr std::size_t kBitstreamHeaderBytes = 40;  // version 1
inline constexpr std::size_t kBitstreamOverheadBytes = kBitstreamHeaderBytes + 4;
inline constexpr std::size_t kHyperpriorHeaderBytes = 56;  // versions 2, 3 and 4
inline constexpr std::size_t kHyperpriorOverheadBytes = kHyperpriorHeaderBytes + 4;
inline constexpr std::size_t kSectionedHeaderBytes = 38;      // version 5, before its sections
inline constexpr std::size_t kSectionHeaderBytes = 8;         // type, flags, payload length
inline constexpr std::size_t kStreamSectionHeaderBytes = 12;  // a coded stream's channels, height, width
inline constexpr std::size_t kMaxSections = 64;
inline constexpr std::uint16_t kSectionCodedStream = 1;
// An ICC colour profile of the source image, optional: its bytes, as the
// image file held them, at most kMaxIccProfileBytes and at least the
// 132 bytes of a profile's header and tag count.
inline constexpr std::uint16_t kSectionIccProfile = 2;
inline constexpr std::size_t kMinIccProfileBytes = 132;
inline constexpr std::size_t kMaxIccProfileBytes = std::size_t(1) << 24;
inline constexpr bool icc_profile_size_fits(std::size_t bytes) {
  return bytes >= kMinIccProfileBytes && bytes <= kMaxIccProfileBytes;
}
inline constexpr std::uint16_t kSectionRequired = 1;  // section flag bit 0

// What kind of model wrote a file, so what its stream holds.
enum class ModelKind : std::uint32_t {
  factorized = 1,             // one latent, per-channel factorized tables (version 1)
  hyperprior = 2,             // hyper-latent z (factorized tables), then y (Gaussian tables by scale index)
  mean_scale_hyperprior = 3,  // as 2, y coded as round(y - mean) (version 3)
  channel_conditional = 4,    // as 3, slice by slice, each slice conditioned on those before (version 4)
  checkerboard = 5,           // as 3, the anchors first, then the other positions from their context (version 5 only)
  autoregressive = 6,         // as 3, position by position from the decoded ones before it (version 5 only)
  grouped_checkerboard = 7,   // channel groups, each coded as a checkerboard (ELIC's space-channel context; version 5)
};
// "factorized-prior", "scale-hyperprior", "mean-scale-hyperprior", "channel-conditional", "checkerboard",
// "autoregressive", "grouped-checkerboard"
const char* model_kind_name(ModelKind kind);
bool has_hyper_latent(ModelKind kind);         // the hyperprior kinds
std::uint16_t format_version(ModelKind kind);  // the version of its kind (5 for a kind newer than version 5)
// The largest image a file may describe: each side (a panorama may be wide)
// and, by default, the pixel count (a decoder may allow more pixels).
inline constexpr std::uint32_t kMaxImageSide = 65535;
inline constexpr std::uint64_t kMaxImagePixels = std::uint64_t(1) << 26;

// Flags: the source image was grey (its one channel copied to R, G and B):
// decompress writes a grey PNG. Any version may set it.
inline constexpr std::uint16_t kFlagGrey = 1;
// The file holds a rate level (a variable-rate model's). Any version may set it.
inline constexpr std::uint16_t kFlagRateLevel = 2;
inline constexpr std::uint32_t kRateLevelOne = 1u << 16;  // the rate level's fixed point

struct BitstreamHeader {
  std::uint16_t version = kBitstreamVersion;
  // Versions 1 to 4 name the kind; version 5 names the codec section
  // (codec_fingerprint) instead, and parse_bitstream sets the kind of the
  // model it matches.
  ModelKind kind = ModelKind::factorized;
  std::uint64_t codec_fingerprint = 0;  // version 5
  bool grey = false;                    // kFlagGrey
  std::uint64_t fingerprint = 0;
  std::uint32_t width = 0, height = 0;
  std::uint32_t channels = 0, latent_height = 0, latent_width = 0;
  // The hyper-latent (hyperprior kinds only; 0 otherwise).
  std::uint32_t hyper_channels = 0, hyper_height = 0, hyper_width = 0;
  // A variable-rate model's rate level, in units of 2^-16 (kFlagRateLevel).
  bool variable_rate = false;
  std::uint32_t rate_level = 0;
  // Version 5: the source image's ICC profile (kSectionIccProfile), empty when none.
  std::vector<std::uint8_t> icc_profile;
};

// A file of version format_version(header.kind) (1 to 4): one stream.
std::vector<std::uint8_t> write_bitstream(const BitstreamHeader& header, const std::vector<std::uint8_t>& stream);

// One coded stream of a version-5 file: the shape of what it codes and its bytes.
struct CodedStream {
  std::uint32_t channels = 0, height = 0, width = 0;
  std::vector<std::uint8_t> bytes;
};
// A version-5 file: header.fingerprint, codec_fingerprint, width, height,
// grey, variable_rate and rate_level, then one section per stream, then
// header.icc_profile's section when it is not empty (ConfigError when it is
// shorter than kMinIccProfileBytes or longer than kMaxIccProfileBytes).
std::vector<std::uint8_t> write_sectioned_bitstream(const BitstreamHeader& header,
                                                    const std::vector<CodedStream>& streams);

// A coded stream where it lies in a file's bytes.
struct StreamView {
  std::uint32_t channels = 0, height = 0, width = 0;
  const std::uint8_t* data = nullptr;
  std::size_t size = 0;
};

// A parsed file: the header and where its coded streams lie in `bytes`
// (versions 1 to 4: one stream, the latent's symbols after the hyper-latent's).
struct Bitstream {
  BitstreamHeader header;
  std::vector<StreamView> streams;
  std::size_t skipped_sections = 0;  // optional sections of unknown types (version 5)
};

// What the decoding model expects of a file.
struct BitstreamExpectation {
  ModelKind kind = ModelKind::factorized;
  std::uint64_t fingerprint = 0;
  std::string model;  // how to name the model in messages (its path)
  std::uint32_t channels = 0;
  // Images are padded to a multiple of `stride`; the latent has
  // `latent_per_stride` positions per stride along each side (1 for a
  // factorized model; the hyper-latent always has 1).
  std::uint32_t stride = 1;
  std::uint32_t latent_per_stride = 1;
  std::uint32_t hyper_channels = 0;
  // Version 5: the codec section's fingerprint, and the channels of each
  // coded stream of the latent (one, or one per channel group).
  std::uint64_t codec_fingerprint = 0;
  std::vector<std::uint32_t> group_channels;
  // A variable-rate model's levels K (0: a model of one rate): its files
  // carry a rate level in [0, K-1] (units of 2^-16).
  std::uint32_t rate_levels = 0;
  std::uint64_t max_pixels = kMaxImagePixels;
};

// Reads a file without its model: checks the magic, version, flags, lengths,
// checksum and the model kind of the version, and reads every header field.
// Throws IoError whose message says what is wrong (the caller prefixes the
// file name). Never reads outside [bytes, bytes + size).
Bitstream read_bitstream(const std::uint8_t* bytes, std::size_t size);

// What the first kBitstreamHeadBytes of a file say in every version: the
// format version, the model's fingerprint and the image size (0x0 when
// `size` ends before it), for a look before the file is read whole or its
// model loaded. IoError when it does not start with the magic, or ends
// before the fingerprint. Nothing else is checked (read_bitstream checks all).
inline constexpr std::size_t kBitstreamHeadBytes = 32;
struct BitstreamHead {
  std::uint16_t version = 0;
  std::uint64_t fingerprint = 0;
  std::uint32_t width = 0, height = 0;
};
BitstreamHead read_bitstream_head(const std::uint8_t* bytes, std::size_t size);

// read_bitstream, then the file against the model that decodes it, before
// anything is used: model kind, rate level, fingerprint, image size, latent
// shapes (version 5: the codec fingerprint and every stream's shape; the
// header gets the model's kind and the latent shapes). Throws IoError whose message says what is wrong (the caller
// prefixes the file name). Never reads outside [bytes, bytes + size).
Bitstream parse_bitstream(const std::uint8_t* bytes, std::size_t size, const BitstreamExpectation& expected);

std::string fingerprint_text(std::uint64_t fingerprint);  // 16 hex digits

}  // namespace plexus::codec

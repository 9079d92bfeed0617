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
// plexus-ae writes version 1 for factorized-prior models (the same bytes as
// before version 2 existed), 2 for scale-hyperprior, 3 for mean-scale and 4
// for channel-conditional models.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace plexus::ae {

inline constexpr std::uint16_t kBitstreamVersion = 4;     // the newest version this plexus-ae reads
inline constexpr std::size_t kBitstreamHeaderBytes = 40;  // version 1
inline constexpr std::size_t kBitstreamOverheadBytes = kBitstreamHeaderBytes + 4;
inline constexpr std::size_t kHyperpriorHeaderBytes = 56;  // versions 2, 3 and 4
inline constexpr std::size_t kHyperpriorOverheadBytes = kHyperpriorHeaderBytes + 4;

// What kind of model wrote a file, so what its stream holds.
enum class ModelKind : std::uint32_t {
  factorized = 1,             // one latent, per-channel factorized tables (version 1)
  hyperprior = 2,             // hyper-latent z (factorized tables), then y (Gaussian tables by scale index)
  mean_scale_hyperprior = 3,  // as 2, y coded as round(y - mean) (version 3)
  channel_conditional = 4,    // as 3, slice by slice, each slice conditioned on those before (version 4)
};
// "factorized-prior", "scale-hyperprior", "mean-scale-hyperprior", "channel-conditional"
const char* model_kind_name(ModelKind kind);
bool has_hyper_latent(ModelKind kind);         // the hyperprior kinds
std::uint16_t format_version(ModelKind kind);  // the version written for it
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
  ModelKind kind = ModelKind::factorized;
  bool grey = false;  // kFlagGrey
  std::uint64_t fingerprint = 0;
  std::uint32_t width = 0, height = 0;
  std::uint32_t channels = 0, latent_height = 0, latent_width = 0;
  // The hyper-latent (hyperprior kinds only; 0 otherwise).
  std::uint32_t hyper_channels = 0, hyper_height = 0, hyper_width = 0;
  // A variable-rate model's rate level, in units of 2^-16 (kFlagRateLevel).
  bool variable_rate = false;
  std::uint32_t rate_level = 0;
};

std::vector<std::uint8_t> write_bitstream(const BitstreamHeader& header, const std::vector<std::uint8_t>& stream);

// A parsed file: the header and where its coded stream lies in `bytes`.
struct Bitstream {
  BitstreamHeader header;
  const std::uint8_t* stream = nullptr;
  std::size_t stream_size = 0;
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

// read_bitstream, then the file against the model that decodes it, before
// anything is used: model kind, rate level, fingerprint, image size, latent
// shapes. Throws IoError whose message says what is wrong (the caller
// prefixes the file name). Never reads outside [bytes, bytes + size).
Bitstream parse_bitstream(const std::uint8_t* bytes, std::size_t size, const BitstreamExpectation& expected);

std::string fingerprint_text(std::uint64_t fingerprint);  // 16 hex digits

}  // namespace plexus::ae

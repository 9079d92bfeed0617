#pragma once
// A plexus-ae model used as an image codec, of one of two kinds.
//
// Factorized prior (bls2017, bmshj2018-factorized): the graph is split at
// the latent the FactorizedEntropyModel reads ("y_hat" in the bundled specs):
//   analysis:  "image" -> latent (the quantiser included: rounded in eval mode)
//   synthesis: latent -> "x_hat"
// compress: pad the image (edge pixels repeated) to a multiple of the
// stride, run the analysis, code each rounded latent value as the symbol
// s = y_hat - m_c with its channel's table (plexus/codec/factorized_tables.h), write the file
// (bitstream.h). decompress: validate the file, decode the symbols, y_hat =
// s + m_c, run the synthesis, crop.
//
// Scale hyperprior (bmshj2018-hyperprior; a spec with a GaussianConditional
// reading [y_hat, scales]): the analysis gives y_hat and the hyper-latent
// z_hat (read by the FactorizedEntropyModel). compress codes z_hat with the
// factorized tables, turns z_hat into one Gaussian-table index per element
// of y_hat with the integer network built from the spec's entropy-parameter
// nodes (plexus/codec/integer_network.h; its calibration is stored in the
// model file), and codes y_hat with those tables
// (plexus/codec/gaussian_tables.h). decompress decodes z_hat, computes the
// same indices, decodes y_hat and runs the synthesis. The image is padded to
// a multiple of the hyper-latent's stride (64 for the bundled specs).
//
// Mean-scale hyperprior (mbt2018-mean; a GaussianConditional reading
// [y_hat, scales, means], y_hat from a QuantizeAroundMean of [y, means]): as
// the scale hyperprior, but the analysis stops at y, the integer network
// also gives each element's mean as a fixed-point integer (units of 2^-16),
// the symbol coded is round(y - mean) and y_hat = symbol + mean.
//
// Channel-conditional (Minnen & Singh 2020; the GaussianConditional's latent a
// Concat of slices, each from its own QuantizeAroundMean): as the
// mean-scale hyperprior, slice by slice: the integer network gives slice
// k's indices and means from the hyper-latent and the slices decoded before
// it, the symbols are round(y_k - mean), and slice k's rounded latent
// symbol + mean goes back into the network, which also gives the decoded
// latent the synthesis reads (the rounded slices plus their latent residual
// predictions, in fixed point).
//
// Checkerboard (He et al. 2021; a "checkerboard" latent codec in the spec's
// codec section): as the mean-scale hyperprior, in two passes over the
// latent's positions: the anchors ((row + column) even) with the integer
// network's parameters for a rounded latent of zeros, then the others with
// the decoded anchors as the context's input; one stream per pass.
//
// Channel groups of checkerboards (He et al. 2022, ELIC; a "channel_groups"
// codec whose groups name checkerboard keys): as the channel-conditional
// model, group by group, each group in a checkerboard's two passes (its
// anchors, then its other positions with its decoded anchors); one stream
// per group and pass (src/grouped_checkerboard_coding.h).
//
// Autoregressive (Minnen et al. 2018; an "autoregressive" latent codec): as
// the mean-scale hyperprior, position by position in a wavefront order
// (src/autoregressive_coding.h), each position's parameters from the
// hyper-latent and the latent decoded before it through a masked context
// convolution; one stream, at both ends the same serial loop.
//
// Every way, the symbols, tables and means depend only on rounded latents
// and integers, so a file decodes to the same latents on every machine and
// device (CPU or CUDA).
#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "plexus/codec/bitstream.h"
#include "plexus/codec/factorized_tables.h"
#include "plexus/checkpoint.h"
#include "plexus/codec/gaussian_tables.h"
#include "plexus/codec/integer_network.h"
#include "plexus/codec/integer_network_quantizer.h"
#include "plexus/codec/rans.h"
#include "plexus/context.h"
#include "plexus/data/image.h"
#include "plexus/model_spec.h"
#include "plexus/net.h"
#include "plexus/registry.h"

namespace plexus::codec {
class AutoregressiveRunner;  // an autoregressive model's latent part (src/autoregressive_coding.h)
}  // namespace plexus::codec

namespace plexus::codec {

struct CodecGraph;      // the model's graph cut at the latent (src/codec_graph.h)
class BandedTransform;  // a transform run in bands of rows (src/codec_model.cpp)

// What coding one image holds at its peak, estimated before any work from the
// model, the image's size and the band of rows its transforms run on. Coding
// runs in phases that follow one another (the transform, then the entropy
// coding, or the other way round to decompress), each freeing what the next
// does not read, so the peak is the model and the larger of the two phases.
struct CodingMemory {
  std::uint64_t model = 0;      // the process, the model's nets and integer network: held throughout
  std::uint64_t coding = 0;     // the entropy coding: the latents, their symbols, indices and means, the file
  std::uint64_t transform = 0;  // the transform beside its band: the image and the latent it reads or writes
  std::uint64_t per_band = 0;   // the activations of the transform's band, and its threads' scratch
  std::int64_t band_rows = 0;   // input rows per step of the bands (the whole height: no bands)
  std::uint64_t total() const { return model + std::max(coding, transform + per_band); }
};

class CodecModel {
 public:
  // A model or checkpoint file written by plexus-ae train (or export). A
  // file without coding tables gets them computed, with one log line.
  static std::unique_ptr<CodecModel> from_file(const std::string& path, const Registry& registry, Device device);
  // From a spec and a file's tensors (the weights, and the coding tables
  // and integer-network calibration when present). `name` names the model in
  // messages. Throws ConfigError when the spec cannot be coded (no single
  // FactorizedEntropyModel, or an "x_hat" that needs more than its latent,
  // or entropy parameters without an exact integer form) and
  // IoError for missing or malformed tensors. The file is taken by value:
  // its tensors are freed as their weights are translated, so a file moved in
  // (as from_file does) is not held twice; a copy shares the caller's tensors.
  CodecModel(const ModelSpec& spec, TensorFile file, const Registry& registry, Device device, std::string name);
  ~CodecModel();

  // `grey`: the image was grey before it was read as RGB; the file says so
  // (kFlagGrey) and decompress gives a grey image back. The image's ICC
  // profile goes into a version-5 file (kSectionIccProfile), and decompress
  // gives it back; versions 1 to 4 have no place for one.
  std::vector<std::uint8_t> compress(const data::Image& image, bool grey = false);
  // A whole file; IoError saying what is wrong when it is not a valid file
  // for this model (the caller adds the file name).
  // `header`, when given, receives the file's header (its grey flag among others).
  data::Image decompress(const std::uint8_t* bytes, std::size_t size, BitstreamHeader* header = nullptr);

  // The latent y_hat compress codes for an image, [1, C, h, w] f32 on the CPU.
  Tensor encode_latent(const data::Image& image);
  // The latent a file decodes to (validated as decompress does), and its header.
  Tensor decode_latent(const std::uint8_t* bytes, std::size_t size, BitstreamHeader* header = nullptr);

  // Everything a file codes: the latent, and for a hyperprior the
  // hyper-latent, the scale-table index of every latent element, the
  // symbols coded for the latent and (mean-scale) the means.
  struct Latents {
    BitstreamHeader header;
    Tensor latent;        // y_hat, [1, C, h, w] f32 on the CPU (integers for the first two kinds); the decoded latent
    Tensor hyper_latent;  // [1, Cz, hz, wz] (hyperprior kinds only)
    std::vector<std::int32_t> indices;  // [C, h, w] (hyperprior kinds only)
    std::vector<std::int32_t> symbols;  // [C, h, w] (hyperprior kinds only): y_hat, or round(y - mean)
    std::vector<std::int64_t> means;    // [C, h, w] in units of 2^-16 (mean-scale only)
  };
  // The analysis of `image`: the latent (for a mean-scale or
  // channel-conditional model y, not yet quantised) and the hyper-latent; no indices.
  Latents analyse(const data::Image& image);
  // What compress codes for `image` (indices and means from the integer
  // network on this model's device).
  Latents encode_latents(const data::Image& image);
  // What a file decodes to, validated as decompress does.
  Latents decode_latents(const std::uint8_t* bytes, std::size_t size);

  ModelKind kind() const { return kind_; }
  // The codec section this model codes by (its own, or the one inferred for
  // its kind) and its fingerprint, which version-5 files carry.
  const nlohmann::json& codec_section() const { return codec_section_; }
  std::uint64_t codec_fingerprint() const { return codec_fingerprint_; }
  // The version compress writes: 5 (the default), or the version of the
  // model's kind (format_version(kind())), for readers of the older format.
  // ConfigError for any other.
  void set_format_version(std::uint16_t version);
  std::uint16_t format_version() const { return format_version_; }
  // A variable-rate model's levels K (GainUnit nodes; 0: a model of one
  // rate). compress codes at the level set here (default 0), rounded to
  // units of 2^-16 and written to the file; decompress uses the file's.
  int rate_levels() const { return rate_levels_; }
  // ConfigError unless this model is variable-rate and 0 <= level <= K-1.
  void set_rate_level(double level);
  double rate_level() const { return rate_level_ / double(kRateLevelOne); }
  // A hyperprior's integer network (z_hat -> indices, means) and its scale table.
  // (empty for a factorized model)
  const codec::IntegerNetwork& integer_network() const;
  const std::vector<double>& scale_table() const { return gaussian_.scales; }

  // FNV-1a 64 over the spec JSON, every weight (name, shape, f32 bytes)
  // and the coding tables: a file names the exact model that can decode it.
  std::uint64_t fingerprint() const { return fingerprint_; }
  const std::string& name() const { return name_; }
  // Images are padded to a multiple of it (the latent's stride, or for a
  // scale hyperprior the hyper-latent's).
  int stride() const { return stride_; }
  std::int64_t channels() const { return latent_channels_; }  // of the coded latent y_hat
  // The factorized tables: of the latent, or of a hyperprior's hyper-latent.
  const codec::FactorizedCodingTables& tables() const { return tables_; }
  // True when the file had no tables (or no integer-network calibration) and
  // they were computed on load.
  bool computed_tables() const { return computed_tables_; }
  Device device() const { return device_; }
  // The largest file this model could ever have written (every symbol
  // escaped to 32 bits, the largest image): a longer file is refused unread.
  std::uint64_t max_file_bytes() const;
  // The precision policy of the transforms on CUDA (plexus/context.h);
  // strict f32 unless set (eval passes its --precision).
  void set_precision(Precision precision) { ctx_->set_precision(precision); }
  // Caps the image size a file may describe (the fuzz harness keeps it small).
  void set_max_pixels(std::uint64_t pixels) { max_pixels_ = pixels; }

  // Bounded memory. On the CPU the analysis (up to the latent) and the
  // synthesis run in bands of rows, each with the halo its layers need, so
  // that their activations grow with the width times the band, not with the
  // pixels; the latents, files and decoded pixels are bit for bit those of a
  // pass over the whole image (codec_model.cpp says how). A transform with a
  // layer of unknown reach (banded_whole_reason) runs on the whole image.
  // `bytes` (0: no bound) bounds what compress and decompress hold: the band
  // is chosen to fit, and a size that cannot fit is refused (Error naming the
  // bound and what it needs) before any work. Without a bound, the bands'
  // activations take about kDefaultBandBytes.
  static constexpr std::uint64_t kDefaultBandBytes = std::uint64_t(512) << 20;
  void set_max_memory(std::uint64_t bytes) { max_memory_ = bytes; }
  std::uint64_t max_memory() const { return max_memory_; }
  // Input rows per band, rounded up to the transform's alignment (0: chosen
  // from the memory bound); tests set it to cut small images into several bands.
  void set_band_rows(std::int64_t rows) { band_rows_ = rows; }
  // The estimate for compressing (`decoding` false) or decompressing a
  // width x height image at the bound set (the band chosen); `file_bytes`:
  // the compressed file's size when known.
  // `fixed_only`: all but the band (no band is planned).
  CodingMemory memory_needed(std::int64_t width, std::int64_t height, bool decoding, std::uint64_t file_bytes = 0,
                             bool fixed_only = false);
  // Error naming the bound and the estimate when memory_needed exceeds max_memory().
  void check_memory(std::int64_t width, std::int64_t height, bool decoding, std::uint64_t file_bytes = 0);
  // Why the analysis or the synthesis runs on the whole image ("" when in bands).
  std::string banded_whole_reason(bool synthesis) const;
  // Called after each band of a transform with the fraction done (0..1) of
  // that image's work, for a progress line; empty: none.
  void set_progress(std::function<void(double)> progress) { progress_ = std::move(progress); }

 private:
  // The steps of the constructor.
  void probe_hyperprior_stride(CodecGraph& graph, const ModelSpec& spec, const Registry& registry);
  std::int64_t build_transforms(const CodecGraph& graph, const ModelSpec& spec, const TensorFile& file,
                                const Registry& registry);
  void load_tables(const CodecGraph& graph, const ModelSpec& spec, TensorFile& file, const Registry& registry,
                   std::int64_t factorized_channels);
  std::uint64_t compute_fingerprint(const ModelSpec& spec);
  // The synthesis of `latent` into the width x height image (cropped), band by band.
  data::Image synthesize(const Tensor& latent, std::uint32_t rate_level, int width, int height);
  // Input rows per band for a transform whose whole input is `shape`.
  std::int64_t band_rows(BandedTransform& transform, const Shape& shape, bool decoding);
  // The activations of the tallest band of steps of `rows` input rows.
  std::uint64_t band_bytes(BandedTransform& transform, const Shape& shape, std::int64_t rows);
  // Every thread's convolution scratch for an input of `shape` (BandedTransform::scratch_bytes_per_thread).
  std::uint64_t scratch_bytes(BandedTransform& transform, const Shape& shape);
  bool transform_whole(bool decoding) const;
  // The latent's groups (one, a channel-conditional model's slices, or a
  // checkerboard's two passes) run through the integer network from the
  // hyper-latent z: for each group its indices and means, then
  // `symbols_of(group, its latent elements, outputs)` gives its symbols (the
  // encoder's from y, the decoder's from the stream), element k of the
  // outputs being the latent's element elements[k] (channel, row, column order).
  // Fills latents.indices, symbols, means and latent (y_hat).
  using SymbolSource = std::function<std::vector<std::int32_t>(std::size_t, const std::vector<std::size_t>&,
                                                               const codec::IntegerOutputs&)>;
  void code_groups(const std::vector<std::int32_t>& z, Latents& latents, const SymbolSource& symbols_of);
  void code_checkerboard(Latents& latents, const SymbolSource& symbols_of);
  void code_autoregressive(Latents& latents, const SymbolSource& symbols_of);
  std::string name_;
  Device device_;
  ModelKind kind_ = ModelKind::factorized;
  nlohmann::json codec_section_;
  std::uint64_t codec_fingerprint_ = 0;
  std::uint16_t format_version_ = kBitstreamVersion;
  std::vector<std::uint32_t> group_channels_;  // the latent's coded streams: one, or one per channel group
  int stride_ = 0;
  int latent_per_stride_ = 1;
  int rate_levels_ = 0;
  std::uint32_t rate_level_ = 0;  // units of 2^-16
  std::int64_t latent_channels_ = 0;
  std::string latent_;                 // the latent blob's name (y_hat)
  std::vector<std::string> analysed_;  // what the analysis gives for it, in channel order (CodecGraph::analysed)
  std::string
      synthesis_input_;  // what the synthesis reads it as (y_hat, or a straight-through quantiser's rounded output)
  std::string hyper_latent_;  // the hyper-latent's (hyperprior kinds only)
  // The analysis up to the latent (run in bands), the rest of it (a
  // hyperprior's hyper-analysis, on the whole latent; null when none) and the synthesis.
  std::unique_ptr<Net> analysis_, hyper_analysis_, synthesis_;
  std::vector<std::string> analysis_outputs_;  // what analysis_ gives: analysed_ and what hyper_analysis_ reads
  std::unique_ptr<BandedTransform> banded_analysis_, banded_synthesis_;
  std::uint64_t weight_bytes_ = 0;
  std::uint64_t max_memory_ = 0;
  std::int64_t band_rows_ = 0;
  std::function<void(double)> progress_;
  std::unique_ptr<Context> ctx_;
  codec::FactorizedCodingTables tables_;
  std::unique_ptr<codec::IntegerNetworkRunner> runner_;          // a hyperprior's integer network, on the device
  std::unique_ptr<codec::AutoregressiveRunner> autoregressive_;  // its latent part, position by position
  codec::GaussianTables gaussian_;
  bool computed_tables_ = false;
  std::uint64_t fingerprint_ = 0;
  std::uint64_t max_pixels_ = kMaxImagePixels;
};

// Why compress and export cannot code a model of `spec`, whatever its
// weights: the reason CodecModel would give after "<spec> cannot be used as
// a codec: ", naming the node at fault ("its GaussianConditional node 'gc'
// has 3 inputs; ..."), from the same checks of the graph (the contract, the
// stride, the cut at the latent, a hyperprior's hyper-latent geometry and
// the integer form of its entropy parameters); nullopt when those checks pass. Weight-dependent
// problems (a degenerate density, a calibration that cannot be used) only
// show once a trained model is loaded.
std::optional<std::string> why_not_codable(const ModelSpec& spec, const Registry& registry);

// Adds coding tables, built from the weights in `file`, to a model file's
// tensors (replacing any there), and for a hyperprior the calibration of
// its integer network: calibrated on the hyper-latents of `calibration_images`
// when given, else on samples of the hyper-latent's prior (kept when the
// file already has one and `recalibrate` is false). Returns false, changing
// nothing, when the spec has no FactorizedEntropyModel. Throws ConfigError
// when the spec cannot be coded or the density is degenerate.
bool add_coding_tables(TensorFile& file, const ModelSpec& spec, const Registry& registry,
                       const std::vector<data::Image>& calibration_images = {}, bool recalibrate = false);

// Rewrites the model file `path` with coding tables added (atomically, as
// every checkpoint is written). The end of `plexus-ae train` calls it; a
// spec without an entropy model leaves the file as it is, and any failure
// (a density too degenerate for tables, say) only warns.
void write_coding_tables(const std::string& path, const Registry& registry);

// The metadata key of a model file's fingerprint (CodecModel::fingerprint,
// 16 hex digits), written by plexus-ae export. Loading a file that records
// one checks it; decompress without --model reads it, and only the header
// it lies in, to find the one shipped model that decodes a file.
inline constexpr const char* kFingerprintMetadataKey = "plexus_ae.model_fingerprint";
// The fingerprint `metadata` records; nullopt when it records none (a file
// exported before the key existed, or one train wrote). IoError naming
// `who` when the value is not 16 hex digits.
std::optional<std::uint64_t> recorded_fingerprint(const std::map<std::string, std::string>& metadata,
                                                  const std::string& who);
// The same of the model file at `path`, reading only its header.
std::optional<std::uint64_t> recorded_fingerprint(const std::string& path);

}  // namespace plexus::codec

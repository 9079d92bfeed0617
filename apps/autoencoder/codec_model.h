#pragma once
// A plexus-ae model used as an image codec. The model's graph is split at
// the latent the FactorizedEntropyModel reads ("y_hat" in the bundled specs):
//   analysis:  "image" -> latent (the quantiser included: rounded in eval mode)
//   synthesis: latent -> "x_hat"
// compress: pad the image (edge pixels repeated) to a multiple of the
// stride, run the analysis, code each rounded latent value as the symbol
// s = y_hat - m_c with its channel's table (coding_tables.h), write the file
// (bitstream.h). decompress: validate the file, decode the symbols, y_hat =
// s + m_c, run the synthesis, crop. The symbols depend only on the rounded
// latent and the integer tables, so a file decodes to the same latent on
// every machine and device.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "bitstream.h"
#include "factorized_entropy_model/coding_tables.h"
#include "plexus/checkpoint.h"
#include "plexus/context.h"
#include "plexus/data/image.h"
#include "plexus/model_spec.h"
#include "plexus/net.h"
#include "plexus/registry.h"

namespace plexus::ae {

class CodecModel {
 public:
  // A model or checkpoint file written by plexus-ae train (or export). A
  // file without coding tables gets them computed, with one log line.
  static std::unique_ptr<CodecModel> from_file(const std::string& path, const Registry& registry, Device device);
  // From a spec and a file's tensors (the weights, and the coding tables
  // when present). `name` names the model in messages. Throws ConfigError
  // when the spec cannot be coded (no single FactorizedEntropyModel, or an
  // "x_hat" that needs more than its latent) and IoError for missing or
  // malformed tensors.
  CodecModel(const ModelSpec& spec, const TensorFile& file, const Registry& registry, Device device,
             std::string name);
  ~CodecModel();

  std::vector<std::uint8_t> compress(const data::Image& image);
  // A whole file; IoError saying what is wrong when it is not a valid file
  // for this model (the caller adds the file name).
  data::Image decompress(const std::uint8_t* bytes, std::size_t size);

  // The rounded latent of an image, [1, C, h, w] f32 on the CPU.
  Tensor encode_latent(const data::Image& image);
  // The latent a file decodes to (validated as decompress does), and its header.
  Tensor decode_latent(const std::uint8_t* bytes, std::size_t size, BitstreamHeader* header = nullptr);

  // FNV-1a 64 over the spec JSON, every weight (name, shape, f32 bytes)
  // and the coding tables: a file names the exact model that can decode it.
  std::uint64_t fingerprint() const { return fingerprint_; }
  const std::string& name() const { return name_; }
  int stride() const { return stride_; }
  std::int64_t channels() const { return tables_.channels(); }
  const layers::FactorizedCodingTables& tables() const { return tables_; }
  // True when the file had no tables and they were computed on load.
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

 private:
  Tensor synthesize(const Tensor& latent);
  std::string name_;
  Device device_;
  int stride_ = 0;
  std::string latent_;  // the latent blob's name
  std::unique_ptr<Net> analysis_, synthesis_;
  Shape analysis_shape_, synthesis_shape_;  // what each net is shaped for now
  std::unique_ptr<Context> ctx_;
  layers::FactorizedCodingTables tables_;
  bool computed_tables_ = false;
  std::uint64_t fingerprint_ = 0;
  std::uint64_t max_pixels_ = kMaxImagePixels;
};

// True when `spec` has a GaussianConditional node (a scale-hyperprior
// model), which compress and decompress do not code yet.
bool has_conditional_entropy_model(const ModelSpec& spec);

// Adds coding tables, built from the weights in `file`, to a model file's
// tensors (replacing any there). Returns false, changing nothing, when the
// spec has no FactorizedEntropyModel. Throws ConfigError when the spec
// cannot be coded or the density is degenerate.
bool add_coding_tables(TensorFile& file, const ModelSpec& spec, const Registry& registry);

// Rewrites the model file `path` with coding tables added (atomically, as
// every checkpoint is written). The end of `plexus-ae train` calls it; a
// spec without an entropy model leaves the file as it is, and any failure
// (a density too degenerate for tables, say) only warns.
void write_coding_tables(const std::string& path, const Registry& registry);

}  // namespace plexus::ae

#pragma once
// `plexus-ae compress`, `plexus-ae decompress` and `plexus-ae export`: the
// codec commands (codec_model.h does the work; docs/bitstream.md is the format).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace plexus::ae {

// The quality compress uses when given neither --model nor --quality (a middle rate, as cwebp's 75).
inline constexpr double kDefaultQuality = 3;

struct CompressOptions {
  std::string model;
  double quality = 0;  // 0: none (kDefaultQuality without --model); else the catalog's model (quality_catalog.h)
  std::optional<double> level;  // a variable-rate model's rate level (--level, or the quality's)
  std::vector<std::string> inputs;
  std::string out;
  std::string device = "auto";
  std::vector<std::string> plugins;
  bool overwrite = false;
  int cpu_threads = 0;  // threads of the CPU kernels; 0: every core
  // Larger images are refused from their header (data::kDefaultMaxImagePixels, as decompress, train and eval).
  std::int64_t max_image_pixels = 50'000'000;
  // --metadata: "icc" carries the image's ICC colour profile in the file (decompress writes it back), "none" leaves
  // it out.
  std::string metadata = "icc";
  std::uint64_t max_memory = 0;  // --max-memory in bytes (0: no bound; CodecModel::set_max_memory)
  bool progress = false;         // --progress: the progress line on stderr even when it is no terminal
};

struct DecompressOptions {
  std::string model;  // empty: the shipped models are tried
  std::vector<std::string> inputs;
  std::string out;
  std::string device = "auto";
  std::vector<std::string> plugins;
  bool overwrite = false;
  // Files of larger images are refused from their header (data::kDefaultMaxImagePixels, as train and eval).
  std::int64_t max_image_pixels = 50'000'000;
  int cpu_threads = 0;           // threads of the CPU kernels; 0: every core
  std::uint64_t max_memory = 0;  // --max-memory in bytes (0: no bound)
  bool progress = false;         // --progress: as compress's
};

struct ExportOptions {
  std::string model;
  std::string out;  // empty: the --model file itself, when it is a model (no optimiser state)
  std::vector<std::string> plugins;
  // A hyperprior's integer network (entropy parameters): calibrated on the images
  // of this folder (empty: kept when the file has a calibration, else the prior's samples).
  std::string calibration_images;
  std::string storage = "f32";  // f32, f16 or int8 (parameter_storage.h)
};

// Each declares its subcommand and options on `app`; once parsed, it runs
// and leaves its exit code in `exit_code`.
void add_compress_command(CLI::App& app, int& exit_code);
void add_decompress_command(CLI::App& app, int& exit_code);
void add_export_command(CLI::App& app, int& exit_code);

int run_compress(const CompressOptions& options);
int run_decompress(const DecompressOptions& options);
int run_export(const ExportOptions& options);

// The trained models shipped with plexus-ae, tried by decompress without
// --model: <executable>/../share/plexus/autoencoder/trained/*.safetensors and
// trained/*/model.safetensors (installed), else the source tree's
// models/trained/*/model.safetensors.
std::vector<std::string> shipped_models();

// The whole of a compressed file, refused unread (IoError naming it) when it
// is not a regular file or is longer than `limit` bytes.
std::vector<std::uint8_t> read_compressed_file(const std::string& path, std::uint64_t limit);

// The quality catalog compress --quality reads: $PLEXUS_AE_QUALITY_CATALOG when
// set, else <executable>/../share/plexus/autoencoder/trained/quality-catalog.json
// (installed), else the source tree's models/trained/quality-catalog.json.
std::string quality_catalog_path();

}  // namespace plexus::ae

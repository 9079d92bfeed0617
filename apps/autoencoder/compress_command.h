#pragma once
// `plexus-ae compress`, `plexus-ae decompress`, `plexus-ae export` and
// `plexus-ae info`: the codec commands (codec_model.h does the work;
// docs/bitstream.md is the format), where they write (codec_outputs.cpp)
// and how export stores parameters (parameter_storage.cpp).
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "plexus/checkpoint.h"
#include "plexus/model_spec.h"
#include "plexus/registry.h"

namespace plexus::ae {

// Where compress and decompress write (codec_outputs.cpp), decided and
// checked before any model is loaded or any image coded, so that a mistake
// in -o costs nothing and leaves nothing behind.

// "-" as an input is standard input, as an output standard output (as
// cwebp, dwebp, cjpeg and djpeg take it): compress reads a PNG or JPEG and
// writes the .pxae bytes, decompress reads the .pxae bytes and writes a PNG;
// "-" in, without -o, is "-" out. The lines that say what was written go
// to stderr when the output is standard output.
inline constexpr const char* kStandardStream = "-";

// The two commands' naming rules.
enum class CodecOutput {
  compressed,  // compress: .pxae files
  image,       // decompress: PNG images
};

// The output path of each input (same order):
//   no -o:  next to the input; compress replaces the extension with .pxae
//           (photo.png -> photo.pxae), decompress with .decoded.png
//           (photo.pxae -> photo.decoded.png), so that it never names the image
//           a file was compressed from;
//   -o ending in '/' or naming an existing folder: in that folder, the
//           input's file name with its extension replaced (x.png -> DIR/x.pxae,
//           x.pxae -> DIR/x.png);
//   "-" in without -o, or -o -: standard output (for one input only);
//   other -o: that file, for one input only (decompress: it must end in .png;
//           compress: it must not end in .png, .jpg or .jpeg).
// ConfigError, before anything is created, for several inputs with a file -o,
// a decompress -o not ending in .png, a compress -o named as an image, or two
// inputs given the same output.
std::vector<std::string> plan_outputs(const std::vector<std::string>& inputs, const std::string& out, CodecOutput kind);

// Refuses (ConfigError, IoError with the system's reason) each output that
// cannot be written, before any work: it is the input itself, a folder, an
// existing file without `overwrite` (a default name of decompress is never
// replaced on a hint: the message says to choose another with -o), or its
// folder is missing and cannot be created, is not a folder, or is not writable.
// `default_names`: no -o was given.
void check_outputs(const std::vector<std::string>& inputs, const std::vector<std::string>& outputs, CodecOutput kind,
                   bool default_names, bool overwrite);

// Refuses a folder among the inputs, saying how to give the files in it
// ("'DIR' is a folder; to compress the images in it, give them: DIR/*.png").
void check_inputs_are_files(const std::vector<std::string>& inputs, CodecOutput kind);

// Creates the missing parent folders of `output`; IoError saying why not.
// Called for every output once check_outputs passed (so that a refused
// command creates nothing, and a folder the system will not create is
// reported before any work), and again before each write.
void create_parent_folders(const std::string& output);

// The parent folders a batch of compress or decompress creates for its
// outputs: created before the work, so that a folder the system will not
// create is reported first, and removed again at the end where they are still
// empty, so that a batch whose every file failed leaves no empty folders.
class OutputFolders {
 public:
  OutputFolders() = default;
  OutputFolders(const OutputFolders&) = delete;
  OutputFolders& operator=(const OutputFolders&) = delete;
  ~OutputFolders();
  // create_parent_folders(output), remembering the folders that it created.
  void create_parents(const std::string& output);

 private:
  std::vector<std::string> created_;  // in the order created: a folder before the folders inside it
};

// The quality compress uses when given neither --model nor --quality (a middle rate, as cwebp's 75).
inline constexpr double kDefaultQuality = 3;

struct CompressOptions {
  std::string model;
  // 0: none (kDefaultQuality without --model); else the catalog's model (plexus/codec/quality_catalog.h).
  double quality = 0;
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
  std::string storage = "f32";  // f32, f16 or int8 (store_parameters_as, below)
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

// `plexus-ae info FILE.pxae...`: what a compressed file holds, read without
// its model: image size, bytes and bits per pixel, format version and model
// kind, the fingerprint of the model that wrote it, and its rate level.
// A file larger than this is refused unread: a file of the largest image
// (2^26 pixels) at 24 bits per pixel stays well below it.
inline constexpr std::uint64_t kMaxInfoFileBytes = std::uint64_t{1} << 30;

// One line for a compressed file's bytes, e.g. "768x512 RGB, 23456 bytes,
// 0.4772 bpp; format version 3 (mean-scale-hyperprior), model fingerprint
// 0123456789abcdef, rate level 2.5". IoError saying what is wrong with them.
std::string describe_compressed_file(const std::vector<std::uint8_t>& bytes);

// Declares the subcommand on `app`; once parsed, it prints a line per file
// and leaves its exit code in `exit_code` (1 when a file could not be read).
void add_info_command(CLI::App& app, int& exit_code);

// How `plexus-ae export --storage` stores a model's parameters:
//   f32   as they are;
//   f16   every parameter as F16, rounded to the nearest (plexus/half.h);
//   int8  the weight of each Conv2d, ConvTranspose2d and FullyConnected node
//         as I8 with an f32 scale per output channel (plexus/int8.h), every
//         other parameter (biases, GDN, the entropy models) as F16.
// The coding tables export adds are not parameters: they stay as they are.
// The output-channel axis of the weight of a node of type `type`, for the
// types whose weight int8 storage quantises: Conv2d [Co, Ci, k, k] -> 0,
// ConvTranspose2d [Ci, Co, k, k] -> 1, FullyConnected [out, in] -> 0;
// -1 for every other type.
int int8_weight_channel_axis(const std::string& type);

// Replaces each parameter of `file` (those of `spec`'s net) by the f32
// values the stored file will load, so that what export derives from them
// (the coding tables, the integer network) matches the file, and returns
// how save_safetensors is to store them. `storage` is f32, f16 or int8;
// IoError naming `who` for a parameter missing from the file or one that
// does not fit the storage.
CompactStorage store_parameters_as(const std::string& storage, TensorFile& file, const ModelSpec& spec,
                                   const Registry& registry, const std::string& who);

}  // namespace plexus::ae

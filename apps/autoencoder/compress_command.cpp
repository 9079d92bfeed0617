#include "compress_command.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <set>

#include <unistd.h>

#include <spdlog/spdlog.h>

#include "console.h"
#include "model_catalog.h"
#include "plexus/train/exit_codes.h"
#include "plexus/atomic_file.h"
#include "plexus/checkpoint.h"
#include "plexus/codec/autoencoder_contract.h"
#include "plexus/codec/bitstream.h"
#include "plexus/codec/codec_model.h"
#include "plexus/data/image_folder.h"
#include "plexus/codec/quality_catalog.h"
#include "plexus/error.h"
#include "plexus/net.h"
#include "output_folder.h"
#include "plexus/checkpoint.h"
#include "plexus/model_spec.h"
#include "session.h"

namespace plexus::ae {

namespace fs = std::filesystem;

namespace {

double milliseconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

// The largest input read from a pipe: a file of the largest image at 24 bits
// per pixel, or a PNG of 50 megapixels, stays well below it.
constexpr std::uint64_t kMaxStandardInputBytes = std::uint64_t{1} << 30;

// All of standard input; IoError past `limit` bytes or on a read error.
std::vector<std::uint8_t> read_standard_input(std::uint64_t limit) {
  std::vector<std::uint8_t> bytes;
  std::uint8_t block[1 << 16];
  for (;;) {
    const std::size_t got = std::fread(block, 1, sizeof block, stdin);
    bytes.insert(bytes.end(), block, block + got);
    if (bytes.size() > limit)
      throw IoError("standard input holds more than " + std::to_string(limit) + " bytes; give a file instead");
    if (got < sizeof block) break;
  }
  if (std::ferror(stdin)) throw IoError("cannot read standard input: " + std::string(std::strerror(errno)));
  return bytes;
}

void write_standard_output(const std::uint8_t* bytes, std::size_t size) {
  if (std::fwrite(bytes, 1, size, stdout) != size || std::fflush(stdout) != 0)
    throw IoError("cannot write standard output: " + std::string(std::strerror(errno)));
}

// Where the line saying what was written goes: stderr when the output itself is standard output.
std::FILE* report_stream(const std::string& output) { return output == kStandardStream ? stderr : stdout; }

// Written to "<path>.tmp-<pid>" then renamed, so a failure leaves no half
// file; the error names the file and the system's reason. "-": standard output.
void write_file(const std::string& path, const std::vector<std::uint8_t>& bytes) {
  if (path == kStandardStream) return write_standard_output(bytes.data(), bytes.size());
  create_parent_folders(path);
  AtomicFile file(path, "compressed image");
  file.write(bytes.data(), bytes.size());
  file.commit();
}

std::string size_text(std::uint32_t width, std::uint32_t height) {
  return std::to_string(width) + "x" + std::to_string(height);
}

// The head of a file's bytes (read_bitstream_head), when they have the magic
// and a fingerprint (the size stays 0x0 when they end before it).
bool head_of(const std::vector<std::uint8_t>& bytes, codec::BitstreamHead* head) {
  try {
    *head = codec::read_bitstream_head(bytes.data(), bytes.size());
  } catch (const IoError&) {
    return false;  // the full read says what is wrong
  }
  return true;
}

// The head of the file at `path`, from its first codec::kBitstreamHeadBytes.
bool peek_head(const std::string& path, codec::BitstreamHead* head) {
  std::ifstream in(path, std::ios::binary);
  std::vector<std::uint8_t> bytes(codec::kBitstreamHeadBytes);
  in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  bytes.resize(static_cast<std::size_t>(in.gcount()));
  return head_of(bytes, head);
}

// A PNG at `path`, or on standard output for "-" (written to a temporary
// file first: the PNG writer writes files).
void write_decoded_png(const std::string& path, const data::Image& image, data::PngColour colour) {
  if (path != kStandardStream) {
    create_parent_folders(path);
    return data::write_png(path, image, colour);
  }
  const fs::path temporary = fs::temp_directory_path() / ("plexus-ae-" + std::to_string(::getpid()) + ".png");
  struct Removal {
    fs::path path;
    ~Removal() {
      std::error_code ignored;
      fs::remove(path, ignored);
    }
  } removal{temporary};
  data::write_png(temporary.string(), image, colour);
  std::ifstream in(temporary, std::ios::binary);
  const std::vector<std::uint8_t> png{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  if (!in.good() && !in.eof()) throw IoError("cannot read back the PNG written to '" + temporary.string() + "'");
  write_standard_output(png.data(), png.size());
}

// Refuses, from its header and before any model or decoding, a file whose
// image has more than `max_pixels` pixels (--max-image-pixels).
// ConfigError naming --max-image-pixels for a width x height image over `max_pixels`.
void refuse_over_pixel_limit(std::int64_t width, std::int64_t height, std::int64_t max_pixels) {
  const std::string problem = data::pixel_limit_problem(width, height, max_pixels);
  if (!problem.empty()) throw ConfigError(problem + "; " + kPixelLimitHint);
}

// Refuses, from its header and before decoding, an image of more than
// `max_pixels` pixels (compress --max-image-pixels).
void check_image_pixel_limit(const std::string& path, std::int64_t max_pixels) {
  data::ImageSize size;
  std::string reason;
  if (!data::read_image_size(path, size, reason, std::numeric_limits<std::int64_t>::max())) return;  // read says why
  refuse_over_pixel_limit(size.width, size.height, max_pixels);
}

// " 1-6 (the shipped qualities: 3)": the catalog's range and the qualities
// whose model is present; "" when the catalog cannot be read.
std::string quality_choices() {
  try {
    const codec::QualityCatalog catalog = codec::load_quality_catalog(codec::shipped_quality_catalog_path());
    if (catalog.entries.empty()) return "";
    std::string shipped;
    for (const codec::QualityEntry& entry : catalog.entries) {
      std::error_code error;
      if (fs::is_regular_file(entry.path, error))
        shipped += (shipped.empty() ? "" : ", ") + std::to_string(entry.quality);
    }
    return " " + std::to_string(catalog.entries.front().quality) + "-" +
           std::to_string(catalog.entries.back().quality) +
           " (the shipped qualities: " + (shipped.empty() ? "none" : shipped) + ")";
  } catch (const Error&) {
    return "";
  }
}

// `text` as a number in [min, max]; nullopt when it is not all one number or outside.
std::optional<double> number_in(const std::string& text, double min, double max) {
  std::size_t stop = 0;
  double value = 0;
  try {
    value = std::stod(text, &stop);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  if (stop != text.size() || !(value >= min) || !(value <= max)) return std::nullopt;
  return value;
}

// The value of --quality: a number in [1, 99], else ConfigError naming the catalog's qualities.
double parse_quality(const std::string& text) {
  if (const std::optional<double> quality = number_in(text, 1, 99)) return *quality;
  throw ConfigError("--quality takes a number" + quality_choices() +
                    " (fractional between the qualities of a variable-rate model), got '" + text + "'");
}

// The value of --level: a number in [0, 1000] (the model checks its own K).
double parse_level(const std::string& text) {
  if (const std::optional<double> level = number_in(text, 0, 1000)) return *level;
  throw ConfigError("--level takes a rate level, a number from 0 (the lowest rate) to K-1, got '" + text + "'");
}

}  // namespace

std::vector<std::uint8_t> read_compressed_file(const std::string& path, std::uint64_t limit) {
  std::error_code error;
  if (!fs::is_regular_file(path, error)) throw IoError("'" + path + "' does not exist or is not a file");
  const std::uint64_t size = fs::file_size(path, error);
  if (error) throw IoError("cannot read '" + path + "': " + error.message());
  if (size > limit)
    throw IoError("'" + path + "': " + std::to_string(size) +
                  " bytes, more than any file the model can have written (" + std::to_string(limit) +
                  "); not a plexus-ae compressed image for it");
  std::vector<std::uint8_t> bytes(static_cast<std::size_t>(size));
  std::ifstream in(path, std::ios::binary);
  in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(size));
  if (!in) throw IoError("cannot read '" + path + "'");
  return bytes;
}

std::vector<std::string> shipped_models() {
  std::vector<std::string> models;
  std::error_code error;
  if (const auto data = installed_data_folder()) {
    const fs::path installed = *data / "trained";
    for (const auto& entry : fs::directory_iterator(installed, error)) {
      if (entry.path().extension() == ".safetensors") models.push_back(entry.path().string());
      const fs::path nested = entry.path() / "model.safetensors";  // the quality catalog's models
      if (fs::is_regular_file(nested, error)) models.push_back(nested.string());
    }
  }
  if (models.empty()) {
    for (const auto& entry : fs::directory_iterator(PLEXUS_AE_SOURCE_TRAINED, error)) {
      const fs::path model = entry.path() / "model.safetensors";
      if (fs::is_regular_file(model, error)) models.push_back(model.string());
    }
  }
  std::sort(models.begin(), models.end());
  return models;
}

int run_compress(const CompressOptions& options) {
  CompressOptions o = options;
  if (!o.model.empty() && o.quality != 0) throw ConfigError("give --model or --quality, not both");
  if (o.model.empty() && o.quality == 0) o.quality = kDefaultQuality;
  if (o.quality != 0) {
    if (o.level) throw ConfigError("give --level with --model; --quality chooses the level itself");
    const codec::QualityChoice choice =
        codec::choose_quality(codec::load_quality_catalog(codec::shipped_quality_catalog_path()), o.quality);
    o.model = choice.path;
    o.level = choice.level;
  }
  if (o.inputs.empty()) throw ConfigError("give at least one image (PNG or JPEG) to compress");
  check_inputs_are_files(o.inputs, CodecOutput::compressed);
  const std::vector<std::string> outputs = plan_outputs(o.inputs, o.out, CodecOutput::compressed);
  check_outputs(o.inputs, outputs, CodecOutput::compressed, o.out.empty(), o.overwrite);
  OutputFolders folders;  // what the system refuses shows now; left empty by failures, removed at the end
  for (const std::string& output : outputs) folders.create_parents(output);
  Registry registry = make_registry(o.plugins);
  const Device device = choose_device(o.device);
  auto model = codec::CodecModel::from_file(o.model, registry, device);
  if (model->rate_levels() > 0 && !o.level)
    throw ConfigError("'" + o.model + "' is a variable-rate model of " + std::to_string(model->rate_levels()) +
                      " rate levels: give --level, 0 (the lowest rate) to " + std::to_string(model->rate_levels() - 1) +
                      " (fractional levels interpolate), or --quality");
  if (o.level) model->set_rate_level(*o.level);
  model->set_max_memory(o.max_memory);
  int failures = 0;
  FileProgress progress(o.progress || stderr_is_terminal(), o.inputs);
  for (std::size_t i = 0; i < o.inputs.size(); ++i) {
    progress.start(i);
    model->set_progress([&progress, i](double fraction) { progress.within(i, fraction); });
    try {
      data::Image image;
      std::string reason;
      data::ImageConversions conversions;
      if (o.inputs[i] == kStandardStream) {
        const std::vector<std::uint8_t> piped = read_standard_input(kMaxStandardInputBytes);
        if (!data::decode_image(piped.data(), piped.size(), o.max_image_pixels, image, reason, &conversions))
          throw IoError("cannot read an image from standard input: " + reason);
      } else {
        check_image_pixel_limit(o.inputs[i], o.max_image_pixels);
        if (!data::try_read_image(o.inputs[i], image, reason, o.max_image_pixels, &conversions))
          throw IoError("cannot read image '" + o.inputs[i] + "': " + reason);
      }
      // Grey is no loss here: the file says so and decompress writes grey again.
      data::ImageConversions lossy = conversions;
      lossy.grey_expanded = false;
      data::warn_about_conversions(o.inputs[i], lossy);
      if (conversions.grey_expanded)
        spdlog::info("'{}' is grey: coded as RGB, decompressed to grey again", o.inputs[i]);
      if (o.metadata == "none") {
        image.icc_profile.clear();
      } else if (!image.icc_profile.empty() && !codec::icc_profile_size_fits(image.icc_profile.size())) {
        spdlog::warn("'{}' has an ICC colour profile of {} bytes, outside the {} to {} a profile has: not kept (its "
                     "colours will be shown as sRGB)",
                     o.inputs[i], image.icc_profile.size(), codec::kMinIccProfileBytes, codec::kMaxIccProfileBytes);
        image.icc_profile.clear();
      }
      const auto start = std::chrono::steady_clock::now();
      // A grey image is coded as RGB and comes back grey (the file's grey flag).
      const std::vector<std::uint8_t> bytes = model->compress(image, conversions.grey_expanded);
      const double ms = milliseconds_since(start);
      write_file(outputs[i], bytes);
      progress.erase();
      std::FILE* report = report_stream(outputs[i]);
      std::fprintf(report, "%s -> %s: %s, %zu bytes, %.4f bpp, %.1f ms\n", o.inputs[i].c_str(), outputs[i].c_str(),
                   size_text(image.width, image.height).c_str(), bytes.size(),
                   8.0 * bytes.size() / (static_cast<double>(image.width) * image.height), ms);
      std::fflush(report);
    } catch (const Error& e) {
      spdlog::error("cannot compress '{}': {}", o.inputs[i], e.what());
      ++failures;
    }
    progress.done(i);
  }
  return failures == 0 ? train::kExitOk : train::kExitError;
}

int run_decompress(const DecompressOptions& o) {
  if (o.inputs.empty()) throw ConfigError("give at least one .pxae file to decompress");
  check_inputs_are_files(o.inputs, CodecOutput::image);
  const std::vector<std::string> outputs = plan_outputs(o.inputs, o.out, CodecOutput::image);
  check_outputs(o.inputs, outputs, CodecOutput::image, o.out.empty(), o.overwrite);
  OutputFolders folders;  // what the system refuses shows now; left empty by failures, removed at the end
  for (const std::string& output : outputs) folders.create_parents(output);
  Registry registry = make_registry(o.plugins);
  const Device device = choose_device(o.device);

  // With --model, that model decodes everything; without, each file gets
  // the shipped model whose fingerprint it carries (`head`, when the file has one).
  std::map<std::string, std::unique_ptr<codec::CodecModel>> models;  // by path
  auto model_for = [&](const std::optional<codec::BitstreamHead>& head) -> codec::CodecModel& {
    if (!o.model.empty()) {
      auto& model = models[o.model];
      if (!model) model = codec::CodecModel::from_file(o.model, registry, device);
      return *model;
    }
    const std::vector<std::string> candidates = shipped_models();
    for (const std::string& path : candidates) {
      auto& model = models[path];
      if (!model) {
        // A model file that records its fingerprint is loaded only when it is the one wanted; one that records
        // none (or cannot be read here) is loaded to compute it, as loading reports what is wrong with it.
        std::optional<std::uint64_t> recorded;
        try {
          recorded = codec::recorded_fingerprint(path);
        } catch (const Error&) {
        }
        if (head && recorded && *recorded != head->fingerprint) continue;
        model = codec::CodecModel::from_file(path, registry, device);
      }
      if (!head || model->fingerprint() == head->fingerprint) return *model;
    }
    if (candidates.empty()) throw ConfigError("no --model given and no shipped model found; pass --model");
    throw ConfigError("it needs the model of fingerprint " + codec::fingerprint_text(head->fingerprint) +
                      ", which is none of the shipped models; pass --model with the model that compressed it");
  };

  int failures = 0;
  FileProgress progress(o.progress || stderr_is_terminal(), o.inputs);
  for (std::size_t i = 0; i < o.inputs.size(); ++i) {
    progress.start(i);
    try {
      const bool piped = o.inputs[i] == kStandardStream;
      std::vector<std::uint8_t> bytes;
      if (piped) bytes = read_standard_input(kMaxStandardInputBytes);
      // The head first: an image over the pixel limit is refused, and the model chosen, before the file is read.
      codec::BitstreamHead head;
      const bool tagged = piped ? head_of(bytes, &head) : peek_head(o.inputs[i], &head);
      if (tagged && head.width != 0 && head.height != 0)
        refuse_over_pixel_limit(head.width, head.height, o.max_image_pixels);
      codec::CodecModel& model = model_for(tagged ? std::optional<codec::BitstreamHead>(head) : std::nullopt);
      model.set_max_memory(o.max_memory);
      model.set_progress([&progress, i](double fraction) { progress.within(i, fraction); });
      if (!piped) bytes = read_compressed_file(o.inputs[i], model.max_file_bytes());
      else if (bytes.size() > model.max_file_bytes())
        throw IoError("standard input: " + std::to_string(bytes.size()) +
                      " bytes, more than any file the model can have written (" +
                      std::to_string(model.max_file_bytes()) + "); not a plexus-ae compressed image for it");
      const auto start = std::chrono::steady_clock::now();
      codec::BitstreamHeader header;
      const data::Image image = model.decompress(bytes.data(), bytes.size(), &header);
      const double ms = milliseconds_since(start);
      write_decoded_png(outputs[i], image, header.grey ? data::PngColour::grey : data::PngColour::rgb);
      progress.erase();
      std::FILE* report = report_stream(outputs[i]);
      std::fprintf(report, "%s -> %s: %s, %.1f ms\n", o.inputs[i].c_str(), outputs[i].c_str(),
                   size_text(image.width, image.height).c_str(), ms);
      std::fflush(report);
    } catch (const Error& e) {
      spdlog::error("cannot decompress '{}': {}", o.inputs[i], e.what());
      ++failures;
    }
    progress.done(i);
  }
  return failures == 0 ? train::kExitOk : train::kExitError;
}

int run_export(const ExportOptions& o) {
  if (o.model.empty()) throw ConfigError("--model is required: a model or checkpoint .safetensors");
  Registry registry = make_registry(o.plugins);
  std::error_code error;
  if (!fs::exists(o.model, error)) throw IoError("model file '" + o.model + "' does not exist");
  TensorFile file = load_safetensors(o.model);
  const ModelSpec spec = spec_from_checkpoint(file, o.model, registry);
  const bool has_optimizer_state = file.metadata.count("optimizer") > 0;
  if (o.out.empty() && has_optimizer_state)
    throw ConfigError("'" + o.model +
                      "' is a training checkpoint (it holds optimiser state); give --out for the "
                      "model file, e.g. --out " +
                      (fs::path(o.model).parent_path() / "model.safetensors").string());
  if (o.storage != "f32" && (o.out.empty() || fs::weakly_canonical(o.out) == fs::weakly_canonical(o.model)))
    throw ConfigError("--storage " + o.storage + " rounds the weights; give an --out other than '" + o.model +
                      "' so that the full-precision model is kept");
  const std::string out = o.out.empty() ? o.model : o.out;
  // A model file: the weights and metadata, without the optimiser's state.
  for (auto it = file.tensors.begin(); it != file.tensors.end();)
    it = it->first.rfind("optimizer/", 0) == 0 ? file.tensors.erase(it) : std::next(it);
  file.metadata.erase("optimizer");
  file.metadata.erase("optimizer_steps");
  // f16 and int8: the parameters replaced by the values the file will load
  // first, so that the coding tables and the integer network below are
  // built from the weights the file holds.
  const CompactStorage storage = store_parameters_as(o.storage, file, spec, registry, o.model);
  std::vector<data::Image> calibration_images;
  if (!o.calibration_images.empty()) {
    data::ImageFolder folder(o.calibration_images);
    for (std::size_t i = 0; i < folder.size(); ++i)
      if (auto image = folder.load(i)) calibration_images.push_back(*image);
  }
  if (!codec::add_coding_tables(file, spec, registry, calibration_images, !calibration_images.empty()))
    throw ConfigError("'" + o.model + "' has no FactorizedEntropyModel node, so it has no coding tables to export");
  // The fingerprint the files of this model will carry, recorded so that decompress finds the model of a file
  // from the model files' headers (file holds what the stored file loads, so the model is the one loaded below).
  file.metadata[codec::kFingerprintMetadataKey] =
      codec::fingerprint_text(codec::CodecModel(spec, file, registry, Device::cpu(), out).fingerprint());
  save_safetensors(out, file, storage);
  // Loading it back checks the tables and the recorded fingerprint.
  auto model = codec::CodecModel::from_file(out, registry, Device::cpu());
  std::printf("%s: %lld channels of coding tables%s, model fingerprint %s, parameters stored as %s\n", out.c_str(),
              static_cast<long long>(model->tables().channels()),
              codec::has_hyper_latent(model->kind()) ? " and the integer network's calibration" : "",
              codec::fingerprint_text(model->fingerprint()).c_str(), o.storage.c_str());
  return train::kExitOk;
}

namespace {
const char* const kDeviceHelp = "cpu, cuda, cuda:N or auto (CUDA when a GPU is visible)";
const char* const kPluginHelp = "a layer plugin .so the model needs (repeatable; PLEXUS_PLUGIN_PATH is also read)";
// "1.5G", "800M", "2000000000": bytes (K, M, G, T: powers of 1000; a trailing B allowed).
std::uint64_t parse_memory_size(const std::string& text) {
  std::size_t used = 0;
  double value = -1;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
  }
  std::string unit = text.substr(std::min(used, text.size()));
  if (!unit.empty() && (unit.back() == 'B' || unit.back() == 'b')) unit.pop_back();
  double scale = 0;
  if (unit.empty()) scale = 1;
  else if (unit == "K" || unit == "k") scale = 1e3;
  else if (unit == "M" || unit == "m") scale = 1e6;
  else if (unit == "G" || unit == "g") scale = 1e9;
  else if (unit == "T" || unit == "t") scale = 1e12;
  if (!(value > 0) || scale == 0 || !std::isfinite(value * scale) || value * scale > 1e18)
    throw ConfigError("--max-memory " + text + " is not a size (a number of bytes, or with K, M, G: 1.5G, 800M)");
  return static_cast<std::uint64_t>(value * scale);
}

void add_memory_options(CLI::App& command, std::shared_ptr<std::string> max_memory, bool& progress) {
  command
      .add_option("--max-memory", *max_memory,
                  "bound the memory of each image: the transforms run in bands of rows chosen to fit, and an image "
                  "that cannot fit is refused before any work (apps/autoencoder/README.md gives the estimate)")
      ->type_name("SIZE");
  command.add_flag("--progress", progress,
                   "show the progress line (per file, with an ETA) on stderr even when it is not a terminal");
}

}  // namespace

void add_compress_command(CLI::App& app, int& exit_code) {
  auto options = std::make_shared<CompressOptions>();
  CLI::App* command = app.add_subcommand("compress", "compress images into .pxae files with a trained model");
  command->option_defaults()->always_capture_default();
  CompressOptions& c = *options;
  command->add_option("images", c.inputs, "PNG or JPEG images to compress ('-': standard input)")
      ->required()
      ->type_name("IMAGE");
  command->add_option("--model", c.model, "model.safetensors written by plexus-ae train or export")->type_name("FILE");
  // Read as text, so that a value that is not a whole number gets a message naming the qualities.
  auto quality = std::make_shared<std::string>();
  command
      ->add_option("-q,--quality", *quality,
                   "instead of --model: the shipped model of this quality "
                   "(models/trained/quality-catalog.json; higher is better and larger); "
                   "default: 3 when no --model is given")
      ->type_name("N");
  command
      ->add_option(
          "-o,--out", c.out,
          "output file (one image; '-': standard output), or a folder (ending in '/' or existing; created when "
          "missing) for several; default: each image's path with .pxae (photo.png -> photo.pxae), standard output "
          "for '-'")
      ->type_name("PATH");
  auto level = std::make_shared<std::string>();
  command
      ->add_option("--level", *level,
                   "with a variable-rate --model: the rate level, 0 (lowest rate) to K-1; "
                   "fractional levels interpolate; the file records it")
      ->type_name("L");
  command->add_option("--device", c.device, kDeviceHelp)->type_name("DEVICE");
  command->add_option("--plugin", c.plugins, kPluginHelp)->type_name("FILE");
  command->add_flag("--overwrite", c.overwrite, "replace output files that already exist");
  command->add_option("--cpu-threads", c.cpu_threads,
                      "threads the CPU kernels use (0: every core); the file is the same for any count");
  add_max_image_pixels_option(*command, c.max_image_pixels,
                              "refuse images of more pixels than this, read from the header before decoding");
  command
      ->add_option("--metadata", c.metadata,
                   "icc: keep the image's ICC colour profile (a PNG's iCCP, a JPEG's ICC_PROFILE) in the file, and "
                   "decompress writes it into the PNG; none: leave it out (the colours are then shown as sRGB). "
                   "EXIF and XMP are not kept")
      ->check(CLI::IsMember({"icc", "none"}))
      ->type_name("icc|none");
  auto max_memory = std::make_shared<std::string>();
  add_memory_options(*command, max_memory, c.progress);
  command->footer(
      "Examples:\n"
      "  plexus-ae compress --model models/trained/bls2017/model.safetensors photo.png    # writes photo.pxae\n"
      "  plexus-ae compress --model runs/demo/model.safetensors kodak/*.png -o compressed/\n"
      "  plexus-ae compress photo.png                                                          # quality 3\n"
      "  plexus-ae compress --quality 3 photo.png                                              # a shipped model\n"
      "  plexus-ae compress --quality 3.5 photo.png                                            # between 3 and 4\n"
      "  cat photo.png | plexus-ae compress - > photo.pxae                                     # a pipe\n"
      "The file format is described in docs/bitstream.md.");
  command->callback([options, quality, level, max_memory, &exit_code] {
    if (!max_memory->empty()) options->max_memory = parse_memory_size(*max_memory);
    if (!quality->empty()) options->quality = parse_quality(*quality);
    if (!level->empty()) options->level = parse_level(*level);
    use_cpu_threads(options->cpu_threads);
    exit_code = run_compress(*options);
  });
}

void add_decompress_command(CLI::App& app, int& exit_code) {
  auto options = std::make_shared<DecompressOptions>();
  CLI::App* command = app.add_subcommand("decompress", "decompress .pxae files into PNG images");
  command->option_defaults()->always_capture_default();
  DecompressOptions& d = *options;
  command->add_option("files", d.inputs, ".pxae files written by plexus-ae compress ('-': standard input)")
      ->required()
      ->type_name("FILE");
  command
      ->add_option("--model", d.model,
                   "the model that compressed them (default: the shipped model whose fingerprint the file carries)")
      ->type_name("FILE");
  command
      ->add_option("-o,--out", d.out,
                   "output .png (one file; '-': standard output), or a folder (ending in '/' or existing; created when "
                   "missing) for several; "
                   "default: each file's path with its extension replaced by .decoded.png (photo.pxae -> "
                   "photo.decoded.png), never the name of the original image")
      ->type_name("PATH");
  command->add_option("--device", d.device, kDeviceHelp)->type_name("DEVICE");
  command->add_option("--plugin", d.plugins, kPluginHelp)->type_name("FILE");
  command->add_flag("--overwrite", d.overwrite, "replace output files that already exist");
  command->add_option("--cpu-threads", d.cpu_threads,
                      "threads the CPU kernels use (0: every core); the image is the same for any count");
  add_max_image_pixels_option(*command, d.max_image_pixels,
                              "refuse files of images of more pixels than this, read from the file's header before "
                              "decoding");
  auto max_memory = std::make_shared<std::string>();
  add_memory_options(*command, max_memory, d.progress);
  command->footer(
      "Examples:\n"
      "  plexus-ae decompress photo.pxae                      # writes photo.decoded.png\n"
      "  plexus-ae decompress photo.pxae -o photo-decoded.png\n"
      "  plexus-ae decompress - < photo.pxae > decoded.png      # a pipe\n"
      "  plexus-ae decompress --model runs/demo/model.safetensors compressed/*.pxae -o decoded/\n"
      "A file is checked completely (format version, model fingerprint, sizes, checksum) before it is decoded.");
  command->callback([options, max_memory, &exit_code] {
    if (!max_memory->empty()) options->max_memory = parse_memory_size(*max_memory);
    use_cpu_threads(options->cpu_threads);
    exit_code = run_decompress(*options);
  });
}

void add_export_command(CLI::App& app, int& exit_code) {
  auto options = std::make_shared<ExportOptions>();
  CLI::App* command =
      app.add_subcommand("export", "write a model file with its entropy-coding tables (what compress needs), "
                                   "optionally with f16 or int8 weights");
  command->option_defaults()->always_capture_default();
  ExportOptions& e = *options;
  command->add_option("--model", e.model, "model.safetensors or checkpoint.safetensors written by plexus-ae train")
      ->required()
      ->type_name("FILE");
  command
      ->add_option("--out", e.out,
                   "the model file to write (default: rewrite --model in place, when it is a model file)")
      ->type_name("FILE");
  command->add_option("--plugin", e.plugins, kPluginHelp)->type_name("FILE");
  command
      ->add_option(
          "--calibration-images", e.calibration_images,
          "hyperprior models: calibrate the integer network of the entropy parameters on the images of this folder "
          "(default: keep the file's calibration, else samples of the hyper-latent's prior)")
      ->type_name("FOLDER");
  command
      ->add_option("--storage", e.storage,
                   "f32; f16: the parameters stored as F16, rounded to the nearest "
                   "(ties to even), half the size; int8: the weights of the convolutions and fully-connected "
                   "layers stored as I8 with an f32 scale per output channel (a quarter of the size), the other "
                   "parameters as F16. Loading converts them to f32, exactly as defined in docs/architecture.md")
      ->check(CLI::IsMember({"f32", "f16", "int8"}));
  command->footer("Examples:\n"
                  "  plexus-ae export --model runs/demo/model.safetensors\n"
                  "  plexus-ae export --model runs/demo/model.safetensors --out demo-f16.safetensors --storage f16\n"
                  "  plexus-ae export --model runs/demo/model.safetensors --out demo-int8.safetensors --storage int8\n"
                  "  plexus-ae export --model runs/demo/checkpoint.safetensors --out runs/demo/step-5000.safetensors\n"
                  "plexus-ae train already writes the tables into model.safetensors; older models get them on load.");
  command->callback([options, &exit_code] { exit_code = run_export(*options); });
}

std::string describe_compressed_file(const std::vector<std::uint8_t>& bytes) {
  const codec::Bitstream file = codec::read_bitstream(bytes.data(), bytes.size());
  const codec::BitstreamHeader& header = file.header;
  const double pixels = static_cast<double>(header.width) * header.height;
  char numbers[96];
  std::snprintf(numbers, sizeof numbers, "%ux%u %s, %zu bytes, %.4f bpp", header.width, header.height,
                header.grey ? "grey" : "RGB", bytes.size(), pixels > 0 ? 8.0 * bytes.size() / pixels : 0.0);
  // Version 5 names its codec section by fingerprint, not a kind: the tree needs the model to be read.
  const std::string format = header.version >= codec::kSectionedVersion
                                 ? std::to_string(file.streams.size()) + " coded stream" +
                                       (file.streams.size() == 1 ? "" : "s") + ", codec section " +
                                       codec::fingerprint_text(header.codec_fingerprint)
                                 : std::string(codec::model_kind_name(header.kind));
  std::string text = std::string(numbers) + "; format version " + std::to_string(header.version) + " (" + format +
                     "), model fingerprint " + codec::fingerprint_text(header.fingerprint);
  if (header.variable_rate) {
    char level[32];
    std::snprintf(level, sizeof level, "%g", header.rate_level / static_cast<double>(codec::kRateLevelOne));
    text += std::string(", rate level ") + level;
  }
  if (!header.icc_profile.empty()) text += ", ICC profile of " + std::to_string(header.icc_profile.size()) + " bytes";
  return text;
}

void add_info_command(CLI::App& app, int& exit_code) {
  auto files = std::make_shared<std::vector<std::string>>();
  CLI::App* command = app.add_subcommand(
      "info", "what .pxae files hold, read without their model: size, bits per pixel, format, model fingerprint");
  command->add_option("files", *files, ".pxae files written by plexus-ae compress")->required()->type_name("FILE");
  command->footer(
      "Example:\n"
      "  plexus-ae info photo.pxae\n"
      "  photo.pxae: 768x512 RGB, 23456 bytes, 0.4772 bpp; format version 5 (2 coded streams, codec section "
      "0123456789abcdef), model fingerprint 0123456789abcdef, rate level 2\n"
      "The file format is described in docs/bitstream.md.");
  command->callback([files, &exit_code] {
    int failures = 0;
    for (const std::string& file : *files) {
      try {
        const std::string line = describe_compressed_file(read_compressed_file(file, kMaxInfoFileBytes));
        std::printf("%s: %s\n", file.c_str(), line.c_str());
      } catch (const Error& e) {
        spdlog::error("cannot read '{}': {}", file, e.what());
        ++failures;
      }
    }
    std::fflush(stdout);
    exit_code = failures == 0 ? train::kExitOk : train::kExitError;
  });
}

}  // namespace plexus::ae

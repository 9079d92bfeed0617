#pragma once
// Helpers of the CodecModel tests: untrained weights with chosen tensors
// scaled, the whole model run as eval runs it, the bits a value costs under a
// coding table, the cross-device check (files compressed on CUDA decode
// to the same latents on the CPU), foreign files refused; and for taking compressed files apart: the
// message of a refused file, and little-endian fields rewritten with the
// trailing CRC-32 recomputed, so a corruption reaches the checks behind the
// checksum.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "apps/cli_runner.h"
#include "codec_graph.h"
#include "data/data_test_support.h"
#include "hyperprior_coding.h"
#include "image_evaluation.h"
#include "plexus/checksum.h"
#include "plexus/codec/autoencoder_contract.h"
#include "plexus/codec/codec_model.h"
#include "plexus/codec/gaussian_tables.h"
#include "plexus/codec/rans.h"
#include "plexus/data/image.h"
#include "plexus/error.h"
#include "plexus/net.h"

namespace plexus::testing {

// The message of the plexus::Error `action` throws, or "no error".
inline std::string error_or_none(const std::function<void()>& action) {
  try {
    action();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

inline std::uint32_t get32(const std::vector<std::uint8_t>& bytes, std::size_t at) {
  return bytes[at] | bytes[at + 1] << 8 | bytes[at + 2] << 16 | static_cast<std::uint32_t>(bytes[at + 3]) << 24;
}

inline void put32(std::vector<std::uint8_t>& bytes, std::size_t at, std::uint32_t value) {
  for (int k = 0; k < 4; ++k) bytes[at + k] = static_cast<std::uint8_t>(value >> (8 * k));
}

// A version-5 file's sections, read as docs/bitstream.md lays them out:
// [type, flags, payload offset, payload length] each, and for a coded
// stream its [channels, height, width] and the rANS stream's offset.
struct SectionView {
  std::uint32_t type = 0, flags = 0;
  std::size_t payload = 0, length = 0;
  std::uint32_t channels = 0, height = 0, width = 0;
  std::size_t stream = 0;
};
inline std::vector<SectionView> sections_of(const std::vector<std::uint8_t>& bytes) {
  std::vector<SectionView> sections;
  const std::size_t count = bytes[36] | bytes[37] << 8;
  std::size_t at = 38;
  for (std::size_t k = 0; k < count; ++k) {
    SectionView section;
    section.type = bytes[at] | bytes[at + 1] << 8;
    section.flags = bytes[at + 2] | bytes[at + 3] << 8;
    section.length = get32(bytes, at + 4);
    section.payload = at + 8;
    if (section.type == 1) {
      section.channels = get32(bytes, at + 8);
      section.height = get32(bytes, at + 12);
      section.width = get32(bytes, at + 16);
      section.stream = at + 20;
    }
    sections.push_back(section);
    at = section.payload + section.length;
  }
  EXPECT_EQ(at + 4, bytes.size()) << "the sections and the checksum fill the file";
  return sections;
}

// Recomputes the trailing CRC-32 over everything before it.
inline void reseal(std::vector<std::uint8_t>& bytes) {
  put32(bytes, bytes.size() - 4, plexus::crc32(bytes.data(), bytes.size() - 4));
}

// Flips bits of the coded stream (bytes [first_byte, end), end the checksum
// unless given: a stream followed by other sections ends earlier; every
// `byte_step`-th byte, bits 0, bit_step, 2 bit_step, ...), reseals each copy
// and returns how many of those files `decode_error` refused (rejected) out
// of how many it saw (total). A refusal must name the coded stream; a file
// that decodes is fine: only a crash or a wrong message is a failure.
struct BitFlipOutcome {
  int rejected = 0;
  int total = 0;
};
inline BitFlipOutcome flip_coded_stream_bits(
    const std::vector<std::uint8_t>& bytes, std::size_t first_byte, std::size_t byte_step, int bit_step,
    const std::function<std::string(const std::vector<std::uint8_t>&)>& decode_error, std::size_t end = 0) {
  BitFlipOutcome outcome;
  if (end == 0) end = bytes.size() - 4;
  for (std::size_t byte = first_byte; byte < end; byte += byte_step)
    for (int bit = 0; bit < 8; bit += bit_step) {
      std::vector<std::uint8_t> flipped = bytes;
      flipped[byte] ^= static_cast<std::uint8_t>(1u << bit);
      reseal(flipped);
      ++outcome.total;
      const std::string message = decode_error(flipped);
      if (message != "no error") {
        ++outcome.rejected;
        EXPECT_NE(message.find("coded stream"), std::string::npos) << message;
      }
    }
  return outcome;
}

// CRC-32 catches every single-bit error; flips in the magic, version and
// length fields are named before the checksum is looked at (version 1 read
// as version 5: its section count).
inline void expect_every_bit_flip_refused(
    const std::vector<std::uint8_t>& bytes,
    const std::function<std::string(const std::vector<std::uint8_t>&)>& decode_error) {
  for (std::size_t byte = 0; byte < bytes.size(); ++byte)
    for (int bit = 0; bit < 8; ++bit) {
      std::vector<std::uint8_t> flipped = bytes;
      flipped[byte] ^= static_cast<std::uint8_t>(1u << bit);
      const std::string message = decode_error(flipped);
      auto says = [&](const char* part) { return message.find(part) != std::string::npos; };
      EXPECT_TRUE(says("checksum mismatch") || says("not a plexus-ae") || says("format version") || says("truncated") ||
                  says("extended") || says("sections (1 to 64 are allowed)"))
          << "byte " << byte << " bit " << bit << ": " << message;
    }
}

// Untrained weights of `spec`; `scaled` weights multiplied by their factor
// so the latents span many integers (and the scales many table entries).
inline TensorFile untrained_weights(const ModelSpec& spec, const Registry& registry, std::uint64_t seed,
                                    const std::map<std::string, double>& scaled) {
  Net net(spec, registry, codec::model_input_shapes(spec, Shape{1, 3, 64, 64}), DType::f32, Device::cpu(), seed);
  TensorFile file;
  for (const NamedParameter& named : net.parameters()) {
    Tensor value = named.parameter->value.clone();
    auto it = scaled.find(named.name);
    if (it != scaled.end()) {
      std::vector<double> values = value.to_values();
      for (double& v : values) v *= it->second;
      value = Tensor::from_values(values, value.shape());
    }
    file.tensors[named.name] = value;
  }
  return file;
}

// The cross-device tests' images: two of the bundled Kodak images and a 37x29 one, no multiple of
// any model's stride.
inline std::vector<data::Image> cross_device_images() {
  std::vector<data::Image> images;
  for (const char* name : {"kodim04.png", "kodim14.png"})
    images.push_back(data::read_image(std::string(PLEXUS_SOURCE_DIR) + "/data/eval-sample/" + name));
  images.push_back(position_image(37, 29));
  return images;
}

// What a version-5 codec says of files not its own (`decode_error` decodes with it): those of
// `other`, the same spec with other weights (their fingerprint), those of the tiny mean-scale model
// (another tree of latent codecs) and a truncated file.
inline void expect_foreign_files_refused(
    codec::CodecModel& other, const Registry& registry,
    const std::function<std::string(const std::vector<std::uint8_t>&)>& decode_error) {
  const data::Image image = position_image(37, 29);
  const std::vector<std::uint8_t> foreign = other.compress(image);
  EXPECT_TRUE(contains(decode_error(foreign), "fingerprint")) << decode_error(foreign);
  const ModelSpec mean_scale = ModelSpec::from_file(std::string(PLEXUS_TEST_MODELS) + "/tiny_mean_scale.json");
  codec::CodecModel ms(mean_scale, untrained_weights(mean_scale, registry, 3, {}), registry, Device::cpu(), "ms");
  const std::vector<std::uint8_t> mean_scale_file = ms.compress(image);
  EXPECT_TRUE(contains(decode_error(mean_scale_file), "a different tree of latent codecs"))
      << decode_error(mean_scale_file);
  EXPECT_TRUE(contains(decode_error({foreign.begin(), foreign.end() - 3}), "truncated"));
}

// The whole model as eval runs it (rounded latents; a context that reads the
// decoded latent given `decoded`, the file's, or else the float model's own:
// ae::DecodedContexts), with the file's weights; each entry of `blobs`, when
// given, receives that blob's value. `level`: a variable-rate model's rate level.
inline ae::ImageEvaluation evaluate_with_weights(const ModelSpec& spec, const Registry& registry,
                                                 const TensorFile& file, const data::Image& image, int stride,
                                                 std::map<std::string, Tensor>* blobs = nullptr, double level = 0,
                                                 const Tensor* decoded = nullptr) {
  const ae::DecodedContexts contexts(spec, registry);
  const Shape shape{1, 3, stride, stride};
  Net net(contexts.empty() ? spec : contexts.spec(), registry,
          contexts.empty() ? codec::model_input_shapes(spec, shape) : contexts.input_shapes(shape));
  for (const NamedParameter& named : net.parameters()) named.parameter->value.copy_from(file.tensors.at(named.name));
  Context ctx;
  ae::ImageEvaluation result = ae::evaluate_image(net, ctx, image, stride, level, &contexts, decoded);
  if (blobs)
    for (auto& [name, value] : *blobs) value = net.blob(name).clone();
  return result;
}

// Bits of `value` under `table`: -log2 of its frequency, or the escape's plus
// the bypass bits (3 + 4 per nibble of zigzag(value)).
inline double code_bits(std::int32_t value, const codec::CodingTable& table) {
  const std::int64_t i = static_cast<std::int64_t>(value) - table.min;
  if (i >= 0 && i < table.count()) return -std::log2((table.cdf[i + 1] - table.cdf[i]) / 65536.0);
  const std::uint32_t zigzag =
      (static_cast<std::uint32_t>(value) << 1) ^ static_cast<std::uint32_t>(value < 0 ? -1 : 0);
  int nibbles = 1;
  while (nibbles < 8 && (zigzag >> (4 * nibbles)) != 0) ++nibbles;
  return -std::log2((table.cdf[table.count() + 1] - table.cdf[table.count()]) / 65536.0) + 3 + 4 * nibbles;
}

// Compress on CUDA; decode on the CPU and on CUDA: the same hyper-latent,
// indices, symbols, means and latent exactly, reconstructions equal within
// float rounding.
// `level`: a variable-rate model's rate level, the same on both.
inline void expect_cross_device(const ModelSpec& spec, const TensorFile& file, const Registry& registry,
                                const std::vector<data::Image>& images, double level = -1) {
  codec::CodecModel on_cuda(spec, file, registry, Device::cuda(), "model");
  codec::CodecModel on_cpu(spec, file, registry, Device::cpu(), "model");
  if (level >= 0) {
    on_cuda.set_rate_level(level);
    on_cpu.set_rate_level(level);
  }
  ASSERT_EQ(on_cuda.fingerprint(), on_cpu.fingerprint());
  for (std::size_t n = 0; n < images.size(); ++n) {
    const data::Image& image = images[n];
    const std::vector<std::uint8_t> bytes = on_cuda.compress(image);
    EXPECT_EQ(on_cuda.compress(image), bytes) << "image " << n << ": compressing twice on CUDA";
    const codec::CodecModel::Latents encoded = on_cuda.encode_latents(image);
    for (codec::CodecModel* decoder : {&on_cpu, &on_cuda}) {
      const codec::CodecModel::Latents decoded = decoder->decode_latents(bytes.data(), bytes.size());
      const std::string where = "image " + std::to_string(n) + ", decoded on " + decoder->device().str();
      EXPECT_EQ(decoded.hyper_latent.to_values(), encoded.hyper_latent.to_values()) << where;
      EXPECT_EQ(decoded.indices, encoded.indices) << where;
      EXPECT_EQ(decoded.symbols, encoded.symbols) << where;
      EXPECT_EQ(decoded.means, encoded.means) << where;
      EXPECT_EQ(decoded.latent.to_values(), encoded.latent.to_values()) << where;
    }
    // The integer network on either device for the CPU's own hyper-latent.
    const codec::CodecModel::Latents cpu_encoded = on_cpu.encode_latents(image);
    const std::vector<std::uint8_t> cpu_bytes = on_cpu.compress(image);
    const codec::CodecModel::Latents cpu_on_cuda = on_cuda.decode_latents(cpu_bytes.data(), cpu_bytes.size());
    EXPECT_EQ(cpu_on_cuda.indices, cpu_encoded.indices) << "image " << n;
    EXPECT_EQ(cpu_on_cuda.means, cpu_encoded.means) << "image " << n;

    const data::Image decoded_on_cpu = on_cpu.decompress(bytes.data(), bytes.size());
    const data::Image decoded_on_cuda = on_cuda.decompress(bytes.data(), bytes.size());
    const data::Image cpu_round_trip = on_cpu.decompress(cpu_bytes.data(), cpu_bytes.size());
    ASSERT_EQ(decoded_on_cpu.pixels.size(), decoded_on_cuda.pixels.size());
    int largest = 0;
    for (std::size_t i = 0; i < decoded_on_cpu.pixels.size(); ++i)
      largest = std::max(largest, std::abs(int(decoded_on_cpu.pixels[i]) - int(decoded_on_cuda.pixels[i])));
    EXPECT_LE(largest, 1) << "image " << n;
    // The CPU's own file differs at most where y or z is within float error of a half-integer.
    EXPECT_GT(data::psnr(cpu_round_trip, decoded_on_cpu), 40.0) << "image " << n;
  }
}

// A test spec of tests/apps/models/ (or at a path starting with '/') trained by plexus-ae train for 300 steps
// at lr 0.005 on the bundled training images, in `folder`; returns the model
// file (with the tables and calibration train stores). Trained for 150 steps
// at lr 0.01, the tiny models' files came out up to 12% under the estimate
// on some images, and which images depended on the last bits of the square
// roots in GDN.
inline std::string train_for_rate_test(const std::string& spec_file, const std::string& folder) {
  const std::string source = PLEXUS_SOURCE_DIR;
  auto trained = run_plexus_ae(
      {"train", "--data", source + "/data/train-sample", "--model",
       spec_file[0] == '/' ? spec_file : std::string(PLEXUS_TEST_MODELS) + "/" + spec_file, "--lambda", "0.01",
       "--patch", "32", "--batch", "4", "--steps", "300", "--lr", "0.005", "--device", "cpu", "--out", folder + "/run"},
      folder);
  EXPECT_EQ(trained.exit_code, 0) << trained.describe();
  EXPECT_EQ(trained.err.find("cannot code"), std::string::npos) << trained.err;
  return folder + "/run/model.safetensors";
}

// Eval's estimate split at the coder's resolution: `bits`, the rate loss's
// likelihoods' -log2 (eval's bpp times the pixels), of which `tail_excess`
// comes from elements less likely than 2^-16: the bits their -log2 counts
// beyond 16. The coder's 16-bit tables give every symbol in range at least
// 2^-16, so it codes those elements in about 16 bits each (an escape, for a
// symbol beyond its table, in a few more): a file comes under the estimate
// by up to tail_excess, however the model was trained.
struct EstimateBits {
  double bits = 0, tail_excess = 0;
};
inline EstimateBits estimate_bits(const ModelSpec& spec, const std::map<std::string, Tensor>& blobs) {
  EstimateBits result;
  for (const NodeSpec& node : spec.nodes) {
    if (node.type != "RateLoss") continue;
    for (const std::string& input : node.inputs) {
      if (std::find(spec.inputs.begin(), spec.inputs.end(), input) != spec.inputs.end()) continue;  // the image
      for (double likelihood : blobs.at(input).to_values()) {
        const double bits = -std::log2(likelihood);
        result.bits += bits;
        result.tail_excess += std::max(bits - 16.0, 0.0);
      }
    }
  }
  return result;
}

// The rate loss's likelihood blobs of `spec`, to read with evaluate_with_weights.
inline std::map<std::string, Tensor> likelihood_blobs(const ModelSpec& spec) {
  std::map<std::string, Tensor> blobs;
  for (const NodeSpec& node : spec.nodes)
    if (node.type == "RateLoss")
      for (const std::string& input : node.inputs)
        if (std::find(spec.inputs.begin(), spec.inputs.end(), input) == spec.inputs.end()) blobs[input] = Tensor();
  return blobs;
}

// A file of `file_bytes` for `image` (`name`, for messages) against eval's
// estimate `eval`, whose likelihoods give `estimate`: within `tolerance`
// (relative) of the estimate at the coder's resolution (its bits less their
// tail excess) and under eval's estimate plus that tolerance; printed.
inline void expect_file_near_the_estimate(const std::string& name, std::size_t file_bytes, const data::Image& image,
                                          const ae::ImageEvaluation& eval, const EstimateBits& estimate,
                                          double tolerance) {
  const double pixels = image.width * image.height, file_bpp = 8.0 * file_bytes / pixels;
  const double coded_bpp = (estimate.bits - estimate.tail_excess) / pixels;
  std::printf("%s: file %.4f bpp, estimate %.4f bpp (%+.2f%%), %.4f bpp at the coder's resolution (%+.2f%%)\n",
              name.c_str(), file_bpp, eval.bpp, 100 * (file_bpp / eval.bpp - 1), coded_bpp,
              100 * (file_bpp / coded_bpp - 1));
  EXPECT_NEAR(estimate.bits / pixels, eval.bpp, 1e-4 * eval.bpp) << name << ": the likelihoods are eval's rate";
  EXPECT_NEAR(file_bpp, coded_bpp, tolerance * coded_bpp) << name;
  EXPECT_LT(file_bpp, (1 + tolerance) * eval.bpp) << name;
}

// Three bundled Kodak crops compressed with the model file `path` of `spec`:
// each file within `rate_tolerance` (relative) of eval's estimate at the
// coder's resolution (its bits less their tail excess, EstimateBits) and
// under eval's estimate plus that tolerance, and its decoded PSNR within
// `psnr_tolerance` dB of eval's. The tolerance covers the file's header and
// streams and the coder's quantised scales and tables; the tail depends on
// how training went (in the tiny mean-scale model trained with FMA, kodim23's
// 0.043 bpp of its 0.73: its file 7.8% under eval's estimate, 2.0% under the
// estimate at the coder's resolution).
inline void expect_files_near_the_estimate(const ModelSpec& spec, const Registry& registry, const std::string& path,
                                           double rate_tolerance, double psnr_tolerance) {
  auto model = codec::CodecModel::from_file(path, registry, Device::cpu());
  EXPECT_FALSE(model->computed_tables()) << "train stores the tables and the calibration";
  const TensorFile file = load_safetensors(path);
  const std::string source = PLEXUS_SOURCE_DIR;
  for (const char* name : {"kodim04.png", "kodim14.png", "kodim23.png"}) {
    const data::Image image = data::read_image(source + "/data/eval-sample/" + name);
    const std::vector<std::uint8_t> bytes = model->compress(image);
    const Tensor latent = model->decode_latents(bytes.data(), bytes.size()).latent;
    std::map<std::string, Tensor> blobs = likelihood_blobs(spec);
    const ae::ImageEvaluation eval =
        evaluate_with_weights(spec, registry, file, image, model->stride(), &blobs, 0, &latent);
    expect_file_near_the_estimate(name, bytes.size(), image, eval, estimate_bits(spec, blobs), rate_tolerance);
    const data::Image decoded = model->decompress(bytes.data(), bytes.size());
    EXPECT_NEAR(data::psnr(image, decoded), eval.psnr, psnr_tolerance) << name;
  }
}

// The float model's bits for an image, a hyperprior whose entropy parameters may read the decoded latent
// (a checkerboard's anchors, an autoregressive context, channel groups): its entropy parameters in f64
// (FloatEvaluation) with every group's input the file's decoded latent, which the network's masks and
// group order let each element's parameters read only where the coder's had it decoded, as eval's
// contexts read it (ae::DecodedContexts). The latent's bits are those of the discretised Gaussian of the
// float network's mean and scale (the scale bound 0.11, the likelihood bound 1e-9, as GaussianConditional's):
// - latent_eval_rounding: the latent's bits for eval's own rounding of `y` (the analysis's latent, in
//   channel order), round(y - mean) + mean;
// - at_coders_resolution: the hyper-latent's bits under the factorized tables, and the decoded latent's,
//   each scale rounded up to the first entry of the coder's scale table at or above it (as the coder
//   picks its table) and each element at most 16 bits (the coder's 16-bit tables give every symbol in
//   range at least 2^-16), or beyond its table the escape's bits and the bypass's (code_bits): what the
//   file can reach.
struct FloatModelRate {
  double latent_eval_rounding = 0, at_coders_resolution = 0;
};
inline FloatModelRate float_model_rate(const ModelSpec& spec, const codec::CodecModel& model, const TensorFile& file,
                                       const codec::CodecModel::Latents& latents, const std::vector<double>& y) {
  codec::CodecGraph graph = codec::split_for_coding(spec);
  const bool reads_latent = !graph.parameter_blobs.rounded.empty();
  if (reads_latent) graph.parameter_blobs.rounded_channels = model.integer_network().groups();
  const codec::FloatNetwork network =
      codec::float_entropy_parameters(spec.nodes, graph.parameter_blobs, file, spec.name);
  const std::vector<double> z = latents.hyper_latent.to_values(), y_hat = latents.latent.to_values();
  std::vector<std::int32_t> z_integers;
  FloatModelRate rate;
  const std::int64_t z_plane = latents.header.hyper_height * latents.header.hyper_width;
  for (std::size_t n = 0; n < z.size(); ++n) {
    const std::int64_t c = static_cast<std::int64_t>(n) / z_plane;
    z_integers.push_back(static_cast<std::int32_t>(z[n]));
    rate.at_coders_resolution +=
        code_bits(static_cast<std::int32_t>(z[n]) - model.tables().medians[c], model.tables().tables[c]);
  }
  codec::FloatEvaluation evaluation(network, z_integers, latents.header.hyper_height, latents.header.hyper_width);
  const std::size_t plane = std::size_t{latents.header.latent_height} * latents.header.latent_width;
  const std::vector<std::int32_t> groups = evaluation.groups();
  std::size_t begin = 0;
  for (std::size_t k = 0; k < groups.size() && reads_latent; ++k) {
    const std::size_t end = begin + static_cast<std::size_t>(groups[k]) * plane;
    evaluation.set_input(static_cast<std::int32_t>(k), {y_hat.begin() + begin, y_hat.begin() + end});
    begin = end;
  }
  std::vector<double> scales, means;
  for (std::size_t k = 0; k < groups.size(); ++k) {
    const codec::FloatOutputs outputs = evaluation.outputs(static_cast<std::int32_t>(k));
    scales.insert(scales.end(), outputs.scales.begin(), outputs.scales.end());
    means.insert(means.end(), outputs.means.begin(), outputs.means.end());
  }
  EXPECT_EQ(scales.size(), y_hat.size());
  EXPECT_EQ(y.size(), y_hat.size());
  if (means.empty()) means.assign(y_hat.size(), 0.0);
  auto bits_of = [](double offset, double scale) {  // -log2 P(|y_hat - mean| = offset) under N(0, scale)
    auto phi = [](double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); };
    return -std::log2(std::max(phi((0.5 - offset) / scale) - phi((-0.5 - offset) / scale), 1e-9));
  };
  const std::vector<double>& table = model.scale_table();
  const codec::GaussianTables coding_tables = codec::build_gaussian_tables(table);
  for (std::size_t n = 0; n < std::min({scales.size(), y.size(), y_hat.size()}); ++n) {
    const double scale = std::max(scales[n], 0.11), mean = means[n];
    rate.latent_eval_rounding += bits_of(std::abs(std::round(y[n] - mean)), scale);
    const auto entry = std::lower_bound(table.begin(), table.end(), scale);
    const std::size_t index = entry == table.end() ? table.size() - 1 : static_cast<std::size_t>(entry - table.begin());
    const codec::CodingTable& coding = coding_tables.tables[index];
    const std::int64_t symbol = std::llround(y_hat[n] - mean);
    rate.at_coders_resolution += symbol >= coding.min && symbol < coding.min + coding.count()
                                     ? std::min(bits_of(std::abs(y_hat[n] - mean), table[index]), 16.0)
                                     : code_bits(static_cast<std::int32_t>(symbol), coding);
  }
  return rate;
}

// What expect_files_at_the_coders_resolution allows, relative unless in dB:
// - coder: a file against the float model's rate at the coder's resolution (float_model_rate). Where the
//   integer network is the float model within its steps, 2%: what that rate leaves out is the file's
//   header, section headers, streams' ends and checksum (about 1% at these sizes: 0.9% of a 10.8 kB
//   file) and the 16-bit tables' quantised frequencies (the tail mass they keep for escapes), and where
//   a step moves a scale across a table entry or a mean by a fraction of 2^-16, that element's bits;
// - eval: a file against eval's estimate, which parts from the file to first order by how the table's
//   scales (6% wider on average, half a step of the table) fit the model's: a loose check that the two
//   measure the same thing;
// - eval_latent_bits: eval's latent bits (its f32 likelihoods, its contexts reading the file's decoded
//   latent) against float_model_rate's f64 ones for the same rounding: f32's rounding, and where the
//   integer network's means part from the float model's, a channel context, which in eval reads eval's
//   own rounding rather than the file's;
// - psnr: the decoded PSNR against eval's, which decodes eval's own rounding.
struct RateBounds {
  double coder = 0.02, eval = 0.1, eval_latent_bits = 0.002, psnr = 0.1;
};

// Three bundled Kodak crops compressed with the weights `file` of `spec` (a hyperprior with means, its
// tables and calibration stored), against the float model's rate at the coder's resolution
// (float_model_rate, the file's decoded latent its contexts' input) and eval's estimate, within `bounds`.
inline void expect_files_at_the_coders_resolution(const ModelSpec& spec, const Registry& registry,
                                                  const TensorFile& file, const RateBounds& bounds = {}) {
  codec::CodecModel model(spec, file, registry, Device::cpu(), spec.name);
  EXPECT_FALSE(model.computed_tables()) << "the file holds the tables and the calibration";
  const codec::CodecGraph graph = codec::split_for_coding(spec);
  std::string latent_likelihoods;
  for (const NodeSpec& node : spec.nodes)
    if (node.name == graph.gaussian_node) latent_likelihoods = node.outputs.at(0);
  for (const char* name : {"kodim04.png", "kodim14.png", "kodim23.png"}) {
    const data::Image image = data::read_image(std::string(PLEXUS_SOURCE_DIR) + "/data/eval-sample/" + name);
    const std::vector<std::uint8_t> bytes = model.compress(image);
    const double pixels = image.width * image.height, file_bpp = 8.0 * bytes.size() / pixels;
    const codec::CodecModel::Latents latents = model.decode_latents(bytes.data(), bytes.size());
    std::map<std::string, Tensor> blobs{{latent_likelihoods, Tensor()}};
    for (const std::string& analysed : graph.analysed) blobs[analysed] = Tensor();
    const ae::ImageEvaluation eval =
        evaluate_with_weights(spec, registry, file, image, model.stride(), &blobs, 0, &latents.latent);
    std::vector<double> y;
    for (const std::string& analysed : graph.analysed) {
      const std::vector<double> part = blobs.at(analysed).to_values();
      y.insert(y.end(), part.begin(), part.end());
    }
    const FloatModelRate rate = float_model_rate(spec, model, file, latents, y);
    double eval_latent_bits = 0;
    for (double likelihood : blobs.at(latent_likelihoods).to_values()) eval_latent_bits -= std::log2(likelihood);
    const double coders_bpp = rate.at_coders_resolution / pixels;
    std::printf("%s: file %.4f bpp, eval's estimate %.4f bpp (%+.2f%%), at the coder's resolution %.4f bpp (%+.2f%%); "
                "the latent's bits in eval %.0f, in f64 %.0f\n",
                name, file_bpp, eval.bpp, 100 * (file_bpp / eval.bpp - 1), coders_bpp,
                100 * (file_bpp / coders_bpp - 1), eval_latent_bits, rate.latent_eval_rounding);
    EXPECT_NEAR(file_bpp, coders_bpp, bounds.coder * coders_bpp) << name;
    EXPECT_NEAR(eval_latent_bits, rate.latent_eval_rounding, bounds.eval_latent_bits * rate.latent_eval_rounding)
        << name;
    EXPECT_NEAR(file_bpp, eval.bpp, bounds.eval * eval.bpp) << name;
    const double psnr = data::psnr(image, model.decompress(bytes.data(), bytes.size()));
    std::printf("%s: PSNR %.3f dB decoded, %.3f dB in eval\n", name, psnr, eval.psnr);
    EXPECT_NEAR(psnr, eval.psnr, bounds.psnr) << name;
  }
}

}  // namespace plexus::testing

#pragma once
// The analysis and synthesis in bands of rows (CodecModel, codec_model.cpp):
// which rows of each blob a band needs, and the plan of bands.
#include <algorithm>
#include <cstdint>
#include <map>
#include <numeric>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "convolution/convolution.h"
#include "gdn/gdn.h"
#include "network_structure.h"
#include "plexus/codec/integer_network.h"
#include "plexus/error.h"
#include "plexus/model_spec.h"
#include "plexus/net.h"
#include "plexus/tensor.h"

namespace plexus::codec {

// A transform (the analysis up to the latent, the synthesis) is run on bands
// of rows of its input, each with the halo its outputs' rows need, so that it
// holds a band's activations, not the image's. Every output value is the
// bit pattern the whole-image pass gives: besides the rows a kernel reads, a
// CPU layer's result depends on where its blocks of rows or pixels start
// (Eigen sums a product's entries near a block's end in another order, and a
// vectorised loop peels by address), so each band tells each convolution and
// GDN where it starts in the whole image (Convolution::set_cpu_block_origin,
// GDN::set_cpu_block_origin), whose blocks then are the whole image's, holds
// whole every block its output rows need, and keeps GDN's planes' sizes and
// starts modulo a vector's width. Known layer kinds only: a node of any other kind (a
// pooling, an attention window, an unknown plugin) has no bounded halo here,
// and the transform runs on the whole image.

struct Rows {
  std::int64_t first = 0, end = 0;
  bool empty() const { return end <= first; }
};

inline Rows joined(Rows a, Rows b) {
  if (a.empty()) return b;
  if (b.empty()) return a;
  return {std::min(a.first, b.first), std::max(a.end, b.end)};
}

inline std::int64_t floor_div(std::int64_t a, std::int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
inline std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return -floor_div(-a, b); }

// Rows of a blob per row of the transform's input: num / den (reduced).
struct RowScale {
  std::int64_t num = 1, den = 1;
  RowScale times(std::int64_t n, std::int64_t d) const {
    const std::int64_t a = num * n, b = den * d, g = std::gcd(a, b);
    return {a / g, b / g};
  }
  bool operator==(const RowScale& other) const { return num == other.num && den == other.den; }
};

// What a node does to rows.
enum class RowOp { pointwise, conv, conv_transposed, gdn, pixel_shuffle };

// The floats of the widest vector (AVX-512): a GDN band starts, and its
// planes' sizes agree with the whole image's, modulo this many pixels.
constexpr std::int64_t kVectorFloats = 16;

inline const std::set<std::string>& pointwise_types() {
  static const std::set<std::string> types{
      "ReLU",         "LeakyReLU",          "Tanh",  "Sigmoid", "GELU", "Abs", "GainUnit",
      "UniformNoise", "QuantizeAroundMean", "Split", "Concat",  "Add",  "Mul", "Identity"};
  return types;
}

inline std::int64_t int_param(const NodeSpec& node, const char* key, std::int64_t fallback) {
  auto it = node.params.find(key);
  return it != node.params.end() && it->is_number_integer() ? it->get<std::int64_t>() : fallback;
}

// The nodes of an analysis that its blobs `targets` need (their ancestors),
// run in bands, and the rest (a hyperprior's hyper-analysis, which reads
// the latent whole), reading the blobs it takes from the first part.
struct AnalysisParts {
  ModelSpec front, rest;
  std::vector<std::string> boundary;  // what the front gives: the targets and what the rest reads of it
};

inline AnalysisParts split_analysis(const ModelSpec& spec, const std::vector<std::string>& targets) {
  std::map<std::string, const NodeSpec*> producer;
  for (const NodeSpec& node : spec.nodes)
    for (const std::string& out : node.outputs) producer[out] = &node;
  std::set<std::string> front_nodes;
  std::vector<std::string> pending = targets;
  while (!pending.empty()) {
    const std::string blob = pending.back();
    pending.pop_back();
    auto it = producer.find(blob);
    if (it == producer.end() || !front_nodes.insert(it->second->name).second) continue;
    pending.insert(pending.end(), it->second->inputs.begin(), it->second->inputs.end());
  }
  AnalysisParts parts;
  parts.front.name = parts.rest.name = spec.name;
  parts.front.source = parts.rest.source = spec.source;
  parts.boundary = targets;
  const auto add_once = [](std::vector<std::string>& list, const std::string& name) {
    if (std::find(list.begin(), list.end(), name) == list.end()) list.push_back(name);
  };
  for (const NodeSpec& node : spec.nodes) {
    if (front_nodes.count(node.name)) {
      parts.front.nodes.push_back(node);
      continue;
    }
    parts.rest.nodes.push_back(node);
    for (const std::string& in : node.inputs) {
      auto it = producer.find(in);
      const bool from_front = it != producer.end() && front_nodes.count(it->second->name);
      if (from_front) add_once(parts.boundary, in);
      if (from_front || (it == producer.end() && in != kImage)) add_once(parts.rest.inputs, in);
      if (it == producer.end() && in == kImage) return {spec, {}, {}};  // the rest reads the image: no split
    }
  }
  for (const std::string& input : spec.inputs)
    for (const NodeSpec& node : parts.front.nodes)
      if (std::find(node.inputs.begin(), node.inputs.end(), input) != node.inputs.end()) {
        add_once(parts.front.inputs, input);
        break;
      }
  return parts;
}

// Copies rows [first, end) of `from` [1, C, h, w] (f32, CPU), starting at its
// row `from_row`, to the same rows of `to` [1, C, H, w] at `to_row`.
inline void copy_rows(const Tensor& from, std::int64_t from_row, Tensor& to, std::int64_t to_row, std::int64_t rows) {
  const std::int64_t channels = from.dim(1), width = from.dim(3);
  const std::int64_t from_plane = from.dim(2) * width, to_plane = to.dim(2) * width;
  const float* in = from.data<float>();
  float* out = to.data<float>();
  for (std::int64_t c = 0; c < channels; ++c)
    std::copy(in + c * from_plane + from_row * width, in + c * from_plane + (from_row + rows) * width,
              out + c * to_plane + to_row * width);
}

class BandedTransform {
 public:
  struct Band {
    Rows input;   // the input rows it reads
    Rows output;  // the output rows it gives (rows of every output)
  };

  // `net`: an inference-only net reading `input` [1, C, H, W] (and perhaps
  // inputs without rows, such as "level"), giving `outputs`, all of one scale.
  BandedTransform(Net& net, std::string input, std::vector<std::string> outputs)
      : net_(net), input_(std::move(input)), outputs_(std::move(outputs)) {
    for (const NodeSpec& node : net.spec().nodes) nodes_[node.name] = &node;
    order_ = net.execution_order();
    scales_[input_] = RowScale{};
    for (const std::string& name : order_) {
      const NodeSpec& node = *nodes_.at(name);
      std::optional<RowScale> scale;
      for (const std::string& in : node.inputs) {
        auto it = scales_.find(in);
        if (it == scales_.end()) continue;  // no rows: "level", or a blob made from such inputs only
        if (scale && !(*scale == it->second)) {
          refuse(node, "reads blobs of different row scales");
          return;
        }
        scale = it->second;
      }
      if (!scale) continue;
      RowOp op = RowOp::pointwise;
      if (node.type == "Conv2d") {
        op = RowOp::conv;
        scale = scale->times(1, int_param(node, "stride", 1));
      } else if (node.type == "ConvTranspose2d") {
        op = RowOp::conv_transposed;
        scale = scale->times(int_param(node, "stride", 1), 1);
      } else if (node.type == "GDN" || node.type == "IGDN") {
        op = RowOp::gdn;
      } else if (node.type == "PixelShuffle") {
        op = RowOp::pixel_shuffle;
        scale = scale->times(int_param(node, "upscale_factor", int_param(node, "factor", 0)), 1);
        if (scale->num == 0) {
          refuse(node, "has no upscale factor this reads");
          return;
        }
      } else if (node.type == "Concat" || node.type == "Split") {
        if (int_param(node, "axis", 1) != 1) {
          refuse(node, "joins or splits along another axis than channels");
          return;
        }
      } else if (!pointwise_types().count(node.type)) {
        {
          refuse(node, "has no bounded halo in rows");
          return;
        }
      }
      ops_[name] = op;
      for (const std::string& out : node.outputs) scales_[out] = *scale;
    }
    for (const std::string& out : outputs_) {
      auto it = scales_.find(out);
      if (it == scales_.end()) {
        refuse_text("'" + out + "' does not depend on the input's rows");
        return;
      }
      if (!(it->second == scales_.at(outputs_[0]))) {
        refuse_text("its outputs have different row scales");
        return;
      }
    }
  }

  // Tells each GDN and convolution node where the band from input row
  // `first` starts in the whole image, so that its CPU blocks are the whole
  // image's: a GDN the pixel of its plane, a convolution the row of its output.
  void set_origins(std::int64_t first) {
    for (const auto& [name, op] : ops_) {
      if (op == RowOp::gdn) {
        auto* gdn = dynamic_cast<layers::GDN*>(&net_.layer(name));
        const std::string& blob = nodes_.at(name)->inputs[0];
        if (gdn) gdn->set_cpu_block_origin(blob_row(blob, first) * net_.blob_shape(blob)[3]);
      } else if (op == RowOp::conv || op == RowOp::conv_transposed) {
        auto* conv = dynamic_cast<layers::Convolution*>(&net_.layer(name));
        if (conv) conv->set_cpu_block_origin(blob_row(nodes_.at(name)->outputs[0], first));
      }
    }
  }

  // "" when it runs in bands; else why it runs on the whole image.
  const std::string& whole_reason() const { return whole_reason_; }

  // The bands for an input of `shape` [1, C, H, W] whose steps are about
  // `rows` input rows (at least the alignment): one band of the whole when
  // the transform cannot run in bands or `rows` covers the image.
  std::vector<Band> plan(const Shape& shape, std::int64_t rows) {
    layout(shape);
    const std::int64_t height = shape[2];
    // A refused transform knows no row scales past the node it refused: its output's height is the net's.
    if (!whole_reason_.empty()) return {{{0, height}, {0, net_.blob_shape(outputs_[0])[2]}}};
    const std::int64_t out_height = heights_.at(outputs_[0]);
    if (rows >= height) return {{{0, height}, {0, out_height}}};
    const std::int64_t step = std::max(alignment_, ceil_div(rows, alignment_) * alignment_);
    std::vector<std::int64_t> firsts;  // each band's first output row
    for (std::int64_t start = 0; start < height; start += step) {
      // The first output row whose rows all lie at or below `start`.
      std::int64_t low = 0, high = out_height;
      while (low < high) {
        const std::int64_t mid = (low + high) / 2;
        if (needed({mid, mid + 1}).first >= start) high = mid;
        else low = mid + 1;
      }
      if (start == 0) low = 0;
      if (low < out_height && (firsts.empty() || low > firsts.back())) firsts.push_back(low);
    }
    std::vector<Band> bands;
    for (std::size_t k = 0; k < firsts.size(); ++k) {
      const Rows output{firsts[k], k + 1 < firsts.size() ? firsts[k + 1] : out_height};
      const std::int64_t first = floor_div(needed(output).first, alignment_) * alignment_;
      bands.push_back({{first, band_end(first, output)}, output});
    }
    layout(shape);
    return bands;
  }

  // The bytes of activations one pass over an input of `shape` holds at its
  // peak, about: the most held at one node, the blobs written before it and
  // read at or after it (or kept: the outputs) and its own outputs, as an
  // inference-only net holds them (Net::set_inference_only): an output
  // written over its input (LayerTraits::forward_in_place) counts once, and a
  // convolution that reads its input last gives the input's rows back as it
  // writes the output's (ForwardOptions::discard_input), so it holds the
  // larger of the two and, as its threads' blocks lag behind one another and
  // their halos, about half the smaller (measured on the shipped models).
  std::uint64_t pass_bytes(const Shape& shape) {
    reshape(shape);
    const auto bytes = [&](const std::string& blob) {
      return 4 * static_cast<std::uint64_t>(shape_numel(net_.blob_shape(blob)));
    };
    const std::set<std::string> kept(outputs_.begin(), outputs_.end());
    std::map<std::string, std::size_t> last_read;  // blob -> the last node (of order_) reading it
    for (std::size_t k = 0; k < order_.size(); ++k)
      for (const std::string& blob : nodes_.at(order_[k])->inputs) last_read[blob] = k;
    const auto expires = [&](const std::string& blob, std::size_t k) {
      return !kept.count(blob) && (!last_read.count(blob) || last_read.at(blob) == k);
    };
    std::map<std::string, std::uint64_t> live{{input_, bytes(input_)}};
    std::uint64_t most = 0;
    for (std::size_t k = 0; k < order_.size(); ++k) {
      const NodeSpec& node = *nodes_.at(order_[k]);
      const std::string* input = node.inputs.empty() ? nullptr : &node.inputs[0];
      const bool read_last = input && expires(*input, k) &&
                             std::count(node.inputs.begin(), node.inputs.end(), *input) == 1 && !node.outputs.empty();
      const bool in_place = read_last && net_.layer(order_[k]).traits(Device::cpu()).forward_in_place &&
                            net_.blob_shape(*input) == net_.blob_shape(node.outputs[0]);
      const auto op = ops_.find(order_[k]);
      const bool gives_back = read_last && !in_place && op != ops_.end() &&
                              (op->second == RowOp::conv || op->second == RowOp::conv_transposed);
      std::uint64_t held = 0;
      for (const auto& [blob, size] : live) held += size;
      for (std::size_t o = 0; o < node.outputs.size(); ++o)
        if (!(o == 0 && in_place)) held += bytes(node.outputs[o]);
      if (gives_back) held -= std::min(bytes(*input), bytes(node.outputs[0])) / 2;
      most = std::max(most, held);
      for (const std::string& blob : node.inputs)
        if (expires(blob, k)) live.erase(blob);
      for (const std::string& blob : node.outputs)
        if (!expires(blob, k)) live[blob] = bytes(blob);
    }
    return most;
  }

  // What one thread's convolution block holds beside the blobs, at most, for an
  // input of `shape`: its columns and the matrix product's packed copy of them.
  // A forward block's columns are whole output rows, at least 256 positions; a
  // transposed pass's a chunk of at most 16 MiB (convolution.cpp).
  std::uint64_t scratch_bytes_per_thread(const Shape& shape) {
    reshape(shape);
    std::uint64_t most = 0;
    for (const auto& [name, op] : ops_) {
      if (op != RowOp::conv && op != RowOp::conv_transposed) continue;
      const NodeSpec& node = *nodes_.at(name);
      const std::uint64_t taps =
          static_cast<std::uint64_t>(int_param(node, "kernel", 1) * int_param(node, "kernel", 1));
      const Shape& in = net_.blob_shape(node.inputs[0]);
      const Shape& out = net_.blob_shape(node.outputs[0]);
      const std::uint64_t columns =
          op == RowOp::conv ? 4 * static_cast<std::uint64_t>(in[1]) * taps *
                                  static_cast<std::uint64_t>(ceil_div(256, out[3]) * out[3])
                            : std::min<std::uint64_t>(std::uint64_t(16) << 20,
                                                      4 * static_cast<std::uint64_t>(out[1] * in[2] * in[3]) * taps);
      most = std::max(most, 2 * columns);
    }
    return most;
  }

  // Input rows per step of the bands: whole multiples of this.
  std::int64_t alignment(const Shape& shape) {
    layout(shape);
    return alignment_;
  }
  // The rows of a blob at input row `input_row` (a band's first).
  std::int64_t blob_row(const std::string& blob, std::int64_t input_row) const {
    auto it = scales_.find(blob);
    if (it == scales_.end()) {
      // Past the node a refused transform stopped at: it runs one band, from row 0.
      if (input_row != 0) throw Error("internal: no row scale of '" + blob + "' for a band");
      return 0;
    }
    return input_row * it->second.num / it->second.den;
  }
  void reshape(const Shape& shape) {
    if (shape == shape_) return;
    std::map<std::string, Shape> shapes = model_input_shapes(net_.spec(), input_, shape);
    net_.reshape(shapes);
    shape_ = shape;
  }

 private:
  void refuse(const NodeSpec& node, const std::string& why) {
    refuse_text("node '" + node.name + "' (" + node.type + ") " + why);
  }
  void refuse_text(const std::string& why) { whole_reason_ = why; }
  static std::int64_t shape_numel(const Shape& shape) {
    std::int64_t n = 1;
    for (std::int64_t d : shape) n *= d;
    return n;
  }
  bool has_rows(const std::string& blob) const { return scales_.count(blob) && net_.blob_shape(blob).size() == 4; }

  // The whole image's heights and widths and the blocks of its layers.
  void layout(const Shape& shape) {
    reshape(shape);
    if (shape == laid_out_) return;
    laid_out_ = shape;
    heights_.clear();
    widths_.clear();
    for (const auto& [blob, scale] : scales_) {
      const Shape& s = net_.blob_shape(blob);
      if (s.size() != 4) continue;
      heights_[blob] = s[2];
      widths_[blob] = s[3];
    }
    blocks_.clear();
    alignment_ = 1;
    for (const auto& [blob, scale] : scales_)
      if (heights_.count(blob)) alignment_ = std::lcm(alignment_, scale.den);
    for (const auto& [name, op] : ops_) {
      const NodeSpec& node = *nodes_.at(name);
      std::int64_t block = 0;  // rows per block, of the blob `at`
      const std::string* at = &node.outputs[0];
      if (op == RowOp::conv || op == RowOp::conv_transposed) {
        layers::ConvGeometry g;
        const bool transposed = op == RowOp::conv_transposed;
        const std::string& image = transposed ? node.outputs[0] : node.inputs[0];
        const std::string& patches = transposed ? node.inputs[0] : node.outputs[0];
        g.channels = net_.blob_shape(image)[1];
        g.height = heights_.at(image);
        g.width = widths_.at(image);
        g.kernel = int_param(node, "kernel", 1);
        g.stride = int_param(node, "stride", 1);
        g.padding = int_param(node, "padding", 0);
        g.dilation = int_param(node, "dilation", 1);
        g.patches_high = heights_.at(patches);
        g.patches_wide = widths_.at(patches);
        block = transposed ? layers::cpu_image_rows_per_block(g) : layers::cpu_patch_rows_per_block(g);
      } else if (op == RowOp::gdn) {
        // Its blocks follow the band's origin (set_origins); a band still starts on a vector's width of pixels.
        at = &node.inputs[0];
        block = kVectorFloats / std::gcd(widths_.at(*at), kVectorFloats);
      }
      if (block == 0) continue;
      blocks_[name] = block;
      // A convolution's blocks follow the band's origin (set_origins): a band may start anywhere in them.
      if (op != RowOp::gdn) continue;
      const RowScale& scale = scales_.at(*at);
      // A band's first row of `at`, first * num / den, a multiple of `block`.
      alignment_ = std::lcm(alignment_, scale.den * (block / std::gcd(scale.num, block)));
    }
  }

  // The rows of every blob that the output rows `output` need, in the whole
  // image's rows: what their kernels read, widened to the blocks that compute them.
  Rows needed(Rows output) { return needed_rows(output).at(input_); }
  std::map<std::string, Rows> needed_rows(Rows output) {
    std::map<std::string, Rows> need;
    for (const std::string& out : outputs_) need[out] = output;
    for (auto it = order_.rbegin(); it != order_.rend(); ++it) {
      auto op_it = ops_.find(*it);
      if (op_it == ops_.end()) continue;
      const NodeSpec& node = *nodes_.at(*it);
      Rows rows;
      for (const std::string& out : node.outputs)
        if (need.count(out)) rows = joined(rows, need[out]);
      if (rows.empty()) continue;
      const std::int64_t out_height = heights_.at(node.outputs[0]);
      const std::int64_t in_height = heights_.at(node.inputs[0]);
      Rows in = rows;
      const std::int64_t k = int_param(node, "kernel", 1), s = int_param(node, "stride", 1);
      const std::int64_t p = int_param(node, "padding", 0), reach = int_param(node, "dilation", 1) * (k - 1);
      switch (op_it->second) {
        case RowOp::pointwise:
          break;
        case RowOp::gdn: {
          const std::int64_t width = widths_.at(node.inputs[0]), block = layers::kGdnForwardBlockPixels;
          const std::int64_t first = floor_div(rows.first * width, block) * block;
          const std::int64_t end = std::min(in_height * width, ceil_div(rows.end * width, block) * block);
          in = {first / width, ceil_div(end, width)};
          break;
        }
        case RowOp::conv: {
          const std::int64_t block = blocks_.at(node.name);
          const Rows whole{floor_div(rows.first, block) * block,
                           std::min(out_height, ceil_div(rows.end, block) * block)};
          in = {whole.first * s - p, (whole.end - 1) * s - p + reach + 1};
          break;
        }
        case RowOp::conv_transposed: {
          // As convolution.cpp's backward_data: image rows [h0, h1) read the patch rows [a0, a1).
          const std::int64_t block = blocks_.at(node.name);
          const std::int64_t h0 = floor_div(rows.first, block) * block;
          const std::int64_t h1 = std::min(out_height, ceil_div(rows.end, block) * block);
          const std::int64_t lowest = h0 + p - reach;
          in = {lowest <= 0 ? 0 : ceil_div(lowest, s), floor_div(h1 - 1 + p, s) + 1};
          break;
        }
        case RowOp::pixel_shuffle: {
          const RowScale ratio =
              scales_.at(node.outputs[0]).times(scales_.at(node.inputs[0]).den, scales_.at(node.inputs[0]).num);
          in = {floor_div(rows.first, ratio.num), ceil_div(rows.end, ratio.num)};
          break;
        }
      }
      in = {std::max<std::int64_t>(0, in.first), std::min(in_height, in.end)};
      for (const std::string& blob : node.inputs)
        if (heights_.count(blob)) need[blob] = joined(need[blob], in);
    }
    return need;
  }

  // Where a band from input row `first` that gives `output` ends: past the
  // rows it needs, at a height every blob's rows divide, with each GDN plane
  // of the size modulo 16 of the whole image's, and holding every row of
  // every blob that the output needs (checked by shape inference at the band).
  std::int64_t band_end(std::int64_t first, Rows output) {
    const std::int64_t height = laid_out_[2];
    std::int64_t unit = 1;
    for (const auto& [blob, scale] : scales_)
      if (heights_.count(blob)) unit = std::lcm(unit, scale.den);
    const std::map<std::string, Rows> need = needed_rows(output);
    const std::int64_t last = need.at(input_).end;
    for (std::int64_t end = std::min(height, ceil_div(last, unit) * unit);; end = std::min(height, end + unit)) {
      if (end == height || band_fits(first, end, need)) return end;
    }
  }

  bool band_fits(std::int64_t first, std::int64_t end, const std::map<std::string, Rows>& need) {
    Shape shape = laid_out_;
    shape[2] = end - first;
    reshape(shape);
    for (const auto& [blob, rows] : need) {
      if (rows.empty() || !heights_.count(blob)) continue;
      const std::int64_t start = blob_row(blob, first), held = net_.blob_shape(blob)[2];
      if (rows.first < start || rows.end > start + held) return false;
    }
    for (const auto& [name, op] : ops_) {
      if (op != RowOp::gdn) continue;
      const std::string& blob = nodes_.at(name)->inputs[0];
      const std::int64_t width = widths_.at(blob);
      if ((net_.blob_shape(blob)[2] * width - heights_.at(blob) * width) % kVectorFloats != 0) return false;
    }
    return true;
  }

  Net& net_;
  std::string input_;
  std::vector<std::string> outputs_;
  std::map<std::string, const NodeSpec*> nodes_;
  std::vector<std::string> order_;
  std::map<std::string, RowScale> scales_;  // the blobs with rows
  std::map<std::string, RowOp> ops_;        // the nodes that read rows
  std::string whole_reason_;
  Shape shape_, laid_out_;
  std::map<std::string, std::int64_t> heights_, widths_, blocks_;
  std::int64_t alignment_ = 1;
};

// The entropy parameters' integer network (a hyperprior's) on bands of rows
// of the hyper-latent z, each with the halo its convolutions read, so that
// it holds a band's tensors, not the whole latent's: the indices and means,
// whole, are those of one pass over z, bit for bit (integer arithmetic; a
// row of an output is computed in a band only when every row it reads, in
// every tensor, is the band's own, not its padding). For a network of one
// group without input nodes (a scale or mean-scale hyperprior) whose
// convolutions keep rows whole (a stride-s convolution reads from a row
// that is a multiple of s); any other runs whole. `rows`: z rows per step.
inline codec::IntegerOutputs banded_network_outputs(codec::IntegerNetworkRunner& runner,
                                                    const std::vector<std::int32_t>& z, std::int64_t height,
                                                    std::int64_t width, std::int64_t rows) {
  const codec::IntegerNetwork& network = runner.network();
  const auto whole = [&] {
    runner.start(z, height, width);
    return runner.outputs(0);
  };
  if (runner.groups().size() != 1 || rows >= height) return whole();
  // Each tensor's rows per row of z (num / den), and the z rows a band's first is a multiple of.
  std::vector<RowScale> scales{RowScale{}};
  std::int64_t alignment = 1;
  for (const codec::IntegerNode& node : network.nodes) {
    if (node.op == codec::IntegerOp::input || node.op == codec::IntegerOp::checkerboard_mask) return whole();
    RowScale scale = scales[static_cast<std::size_t>(node.inputs[0])];
    for (std::int32_t input : node.inputs)
      if (!(scales[static_cast<std::size_t>(input)] == scale)) return whole();
    if (node.op == codec::IntegerOp::convolution)
      scale = node.conv.transposed ? scale.times(node.conv.stride, 1) : scale.times(1, node.conv.stride);
    alignment = std::lcm(alignment, scale.den);
    scales.push_back(scale);
  }
  const std::vector<codec::Side> sides = codec::network_sides(network, height, width);
  const auto height_of = [&](std::size_t tensor) { return sides[tensor].first; };
  // The rows of every tensor that rows `output` of the outputs read (whole-image rows).
  const auto needed = [&](Rows output) {
    std::vector<Rows> need(sides.size());
    need[static_cast<std::size_t>(network.scales)] = output;
    if (network.means >= 0) need[static_cast<std::size_t>(network.means)] = output;
    for (std::size_t n = network.nodes.size(); n-- > 0;) {
      const Rows rows_out = need[n + 1];
      if (rows_out.empty()) continue;
      const codec::IntegerNode& node = network.nodes[n];
      Rows in = rows_out;
      if (node.op == codec::IntegerOp::convolution) {
        const codec::IntegerConvLayer& c = node.conv;
        if (c.transposed)  // output row h reads the input rows a with a s - p <= h <= a s - p + k - 1
          in = {ceil_div(rows_out.first + c.padding - c.kernel + 1, c.stride),
                floor_div(rows_out.end - 1 + c.padding, c.stride) + 1};
        else  // output row o reads the input rows o s - p .. o s - p + k - 1
          in = {rows_out.first * c.stride - c.padding, (rows_out.end - 1) * c.stride - c.padding + c.kernel};
      }
      for (std::int32_t input : node.inputs) {
        const std::size_t t = static_cast<std::size_t>(input);
        need[t] = joined(need[t], {std::clamp<std::int64_t>(in.first, 0, height_of(t) - 1),
                                   std::clamp<std::int64_t>(in.end, 1, height_of(t))});
      }
    }
    return need;
  };
  const std::size_t out = static_cast<std::size_t>(network.scales);
  const std::int64_t out_height = height_of(out), out_width = sides[out].second;
  const std::int64_t channels = static_cast<std::int64_t>(network.channels()[out]);
  codec::IntegerOutputs result;
  result.shape = {channels, out_height, out_width};
  result.indices.resize(static_cast<std::size_t>(channels * out_height * out_width));
  if (network.means >= 0) result.means.resize(result.indices.size());
  const std::int64_t step = std::max(alignment, ceil_div(rows, alignment) * alignment);
  const std::int64_t plane = height * width;
  for (std::int64_t start = 0; start < height; start += step) {
    const bool last = start + step >= height;
    const Rows output{start * scales[out].num / scales[out].den,
                      last ? out_height : std::min(out_height, (start + step) * scales[out].num / scales[out].den)};
    if (output.empty()) continue;
    const std::vector<Rows> need = needed(output);
    const std::int64_t first = floor_div(need[0].first, alignment) * alignment;
    // The band's end: past the z rows it reads, until every tensor holds the rows it needs.
    std::int64_t end = std::max(need[0].end, first + 1);
    for (;; ++end) {
      if (end >= height) {
        end = height;
        break;
      }
      const std::vector<codec::Side> band = codec::network_sides(network, end - first, width);
      bool fits = true;
      for (std::size_t t = 0; t < sides.size() && fits; ++t) {
        const std::int64_t offset = first * scales[t].num / scales[t].den;
        fits = need[t].empty() || (need[t].first >= offset && need[t].end <= offset + band[t].first);
      }
      if (fits) break;
    }
    const std::int64_t z_channels = static_cast<std::int64_t>(z.size()) / plane, band_plane = (end - first) * width;
    std::vector<std::int32_t> input(static_cast<std::size_t>(z_channels * band_plane));
    for (std::int64_t c = 0; c < z_channels; ++c)
      std::copy(z.begin() + c * plane + first * width, z.begin() + c * plane + end * width,
                input.begin() + c * band_plane);
    runner.start(input, end - first, width);
    const codec::IntegerOutputs part = runner.outputs(0);
    const std::int64_t offset = first * scales[out].num / scales[out].den, part_height = part.shape[1];
    for (std::int64_t c = 0; c < channels; ++c) {
      const std::int64_t from = (c * part_height + output.first - offset) * out_width;
      const std::int64_t to = (c * out_height + output.first) * out_width;
      const std::int64_t count = (output.end - output.first) * out_width;
      std::copy(part.indices.begin() + from, part.indices.begin() + from + count, result.indices.begin() + to);
      if (!part.means.empty())
        std::copy(part.means.begin() + from, part.means.begin() + from + count, result.means.begin() + to);
    }
  }
  return result;
}

}  // namespace plexus::codec

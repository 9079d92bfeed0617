#include "summary_command.h"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <regex>

#include "plexus/train/exit_codes.h"
#include "model_catalog.h"
#include "options.h"
#include "plexus/codec/autoencoder_contract.h"
#include "plexus/error.h"
#include "plexus/flop_count.h"
#include "plexus/train/trainer_options.h"
#include "session.h"

namespace plexus::ae {

namespace {

// 1234567 -> "1,234,567" (a count, rounded to a whole number).
std::string grouped(double value) {
  char digits[64];
  std::snprintf(digits, sizeof digits, "%.0f", value);
  std::string text = digits;
  for (int at = static_cast<int>(text.size()) - 3; at > 0; at -= 3) text.insert(static_cast<std::size_t>(at), ",");
  return text;
}

// (36456382464, "FLOPs") -> "36.46 GFLOPs"; (2994691, "") -> "2.99 M".
std::string scaled(double value, const std::string& unit) {
  const char* prefixes[] = {"", "k", "M", "G", "T", "P"};
  int prefix = 0;
  while (value >= 1000.0 && prefix < 5) {
    value /= 1000.0;
    ++prefix;
  }
  char number[32];
  std::snprintf(number, sizeof number, prefix == 0 ? "%.0f" : "%.2f", value);
  const std::string suffix = prefixes[prefix] + unit;
  return suffix.empty() ? number : number + (" " + suffix);
}

std::string pad_right(const std::string& text, std::size_t width) {
  return text + std::string(width > text.size() ? width - text.size() : 0, ' ');
}
std::string pad_left(const std::string& text, std::size_t width) {
  return std::string(width > text.size() ? width - text.size() : 0, ' ') + text;
}

// The spec's inputs, which summary fills as the app does: "image" [N, 3, H, W],
// a variable-rate model's "level" and "mse_weight" [N]. ConfigError naming any other.
void check_inputs(const ModelSpec& spec) {
  const std::vector<std::string> known{codec::kImage, codec::kRateLevel, codec::kMseWeight};
  std::string inputs;
  for (const std::string& input : spec.inputs) inputs += (inputs.empty() ? "\"" : ", \"") + input + "\"";
  for (const std::string& input : spec.inputs)
    if (std::find(known.begin(), known.end(), input) == known.end())
      throw ConfigError(spec.source + ": input \"" + input + "\" is none that summary can size (its inputs are [" +
                        inputs +
                        "]; a plexus-ae model reads \"image\" [N, 3, H, W], and a variable-rate one "
                        "\"level\" and \"mse_weight\" [N])");
  if (std::find(spec.inputs.begin(), spec.inputs.end(), codec::kImage) == spec.inputs.end())
    throw ConfigError(spec.source + ": no input \"image\" to give the --patch size to (its inputs are [" + inputs +
                      "])");
}

// Whether `spec` builds for one image of side x side pixels.
bool builds_for(const ModelSpec& spec, const Registry& registry, std::int64_t side) {
  try {
    Net probe(spec, registry, codec::model_input_shapes(spec, Shape{1, 3, side, side}), DType::f32, Device::cpu(), 0,
              InitialParameters::shapes_only);
    return true;
  } catch (const ShapeError&) {
    return false;
  }
}

struct Row {
  std::string node, type, output, parameters, flops;
};

}  // namespace

ImageSize parse_patch(const std::string& text) {
  const std::string expected = "give S (S x S pixels) or HxW, each side 1 to " + std::to_string(kMaxPatch);
  std::smatch match;
  if (!std::regex_match(text, match, std::regex("([0-9]{1,9})(?:x([0-9]{1,9}))?")))
    throw ConfigError("--patch: '" + text + "' is not an image size; " + expected);
  const std::int64_t height = std::stoll(match[1].str());
  const std::int64_t width = match[2].matched ? std::stoll(match[2].str()) : height;
  if (height < 1 || width < 1 || height > kMaxPatch || width > kMaxPatch)
    throw ConfigError("--patch: '" + text + "' is out of range; " + expected);
  return {height, width};
}

std::string net_summary(Net& net, std::int64_t batch, const ImageSize& image) {
  std::vector<Row> rows{{"node", "type", "output", "parameters", "FLOPs"}};
  double total_flops = 0, activation_bytes = 0;
  for (const std::string& name : net.execution_order()) {
    const NodeSpec& node = *std::find_if(net.spec().nodes.begin(), net.spec().nodes.end(),
                                         [&](const NodeSpec& n) { return n.name == name; });
    std::vector<Shape> inputs, outputs;
    for (const std::string& blob : node.inputs) inputs.push_back(net.blob_shape(blob));
    std::string output;
    for (const std::string& blob : node.outputs) {
      outputs.push_back(net.blob_shape(blob));
      output += (output.empty() ? "" : " ") + shape_str(outputs.back());
      activation_bytes += static_cast<double>(shape_numel(outputs.back()) * dtype_size(net.blob_dtype(blob)));
    }
    std::int64_t parameters = 0;
    for (const Parameter* parameter : net.layer(name).parameters())
      if (parameter->trainable) parameters += shape_numel(parameter->shape);
    const std::optional<double> flops = forward_flops(node.type, node.params, inputs, outputs);
    total_flops += flops.value_or(0.0);
    rows.push_back({name, node.type, output, grouped(static_cast<double>(parameters)), flops ? grouped(*flops) : "-"});
  }
  std::size_t widths[5] = {0, 0, 0, 0, 0};
  for (const Row& row : rows) {
    const std::string* cells[5] = {&row.node, &row.type, &row.output, &row.parameters, &row.flops};
    for (int i = 0; i < 5; ++i) widths[i] = std::max(widths[i], cells[i]->size());
  }
  std::string text;
  for (const Row& row : rows)
    text += pad_right(row.node, widths[0] + 2) + pad_right(row.type, widths[1] + 2) +
            pad_right(row.output, widths[2] + 2) + pad_left(row.parameters, widths[3]) + "  " +
            pad_left(row.flops, widths[4]) + "\n";

  const double per_image = total_flops / static_cast<double>(batch);
  const double pixels = static_cast<double>(image.height) * static_cast<double>(image.width);
  const std::string size = std::to_string(image.height) + "x" + std::to_string(image.width);
  char mebibytes[32];
  std::snprintf(mebibytes, sizeof mebibytes, "%.1f MiB", activation_bytes / (1024.0 * 1024.0));
  text += "\nparameters:       " + grouped(static_cast<double>(net.parameter_count())) + " (" +
          scaled(static_cast<double>(net.parameter_count()), "") + ")\n";
  text += "FLOPs per image:  " + grouped(per_image) + " (" + scaled(per_image, "FLOPs") + "; " +
          grouped(per_image / pixels) + " per pixel of a " + size + " image)\n";
  text += "forward FLOPs:    " + grouped(total_flops) + " (" + scaled(total_flops, "FLOPs") + ") for a batch of " +
          std::to_string(batch) + "\n";
  text += "activations:      " + std::string(mebibytes) + " (every node's outputs, as the net stores them)\n";
  text += "A multiply-add counts as 2 FLOPs. Counted: the matrix products (convolutions, GDN's channel mixing,\n"
          "fully connected layers); \"-\": not counted.\n";
  return text;
}

int run_summary(const SummaryOptions& options) {
  const ImageSize image = parse_patch(options.patch);
  if (options.batch < 1 || options.batch > train::kMaxBatch)
    throw ConfigError("--batch must be in [1, " + std::to_string(train::kMaxBatch) + "], got " +
                      std::to_string(options.batch));
  const ModelSpec spec = resolve_model(options.spec);
  check_inputs(spec);
  const Registry registry = make_registry(options.plugins);
  std::unique_ptr<Net> net;
  try {
    net = std::make_unique<Net>(spec, registry,
                                codec::model_input_shapes(spec, Shape{options.batch, 3, image.height, image.width}),
                                DType::f32, Device::cpu(), 0, InitialParameters::shapes_only);
  } catch (const ShapeError& e) {
    if (!builds_for(spec, registry, kDefaultSide)) throw;
    // The spec is sound and --patch is at fault: most often a side that is no multiple of the model's stride.
    throw ShapeError(std::string(e.what()) + " (--patch " + options.patch + ": the net builds for " +
                     std::to_string(kDefaultSide) + "x" + std::to_string(kDefaultSide) +
                     "; a codec's image sides must be multiples of its stride, 16 for a factorized model, 64 for a "
                     "hyperprior)");
  }
  std::printf("model '%s' (%s), image [%d, 3, %lld, %lld], on the CPU in f32\n\n", spec.name.c_str(),
              spec.source.c_str(), options.batch, static_cast<long long>(image.height),
              static_cast<long long>(image.width));
  std::fputs(net_summary(*net, options.batch, image).c_str(), stdout);
  std::fflush(stdout);
  return train::kExitOk;
}

void add_summary_command(CLI::App& app, int& exit_code) {
  auto options = std::make_shared<SummaryOptions>();
  CLI::App* command = app.add_subcommand(
      "summary", "the net a model spec builds, like torchinfo: a row per node with its type, output shape, "
                 "parameters and forward FLOPs, then the totals (built on the CPU, not trained or run)");
  command
      ->add_option(
          "spec", options->spec,
          "a bundled model (" +
              [] {
                std::string names;
                for (const std::string& name : bundled_model_names()) names += (names.empty() ? "" : ", ") + name;
                return names;
              }() +
              ") or a JSON model spec file")
      ->required()
      ->type_name("NAME|FILE");
  command->add_option("--patch", options->patch, "the image size the net is built for: S (S x S pixels) or HxW")
      ->type_name("SIZE");
  command->add_option("--batch", options->batch, "images per batch")->type_name("N");
  command
      ->add_option("--plugin", options->plugins,
                   "a layer plugin .so the spec's types come from (repeatable; PLEXUS_PLUGIN_PATH is also read)")
      ->type_name("FILE");
  command->footer("FLOPs are those of one forward pass, a multiply-add counted as 2 FLOPs (so 2 * MACs), for the\n"
                  "matrix products: Conv2d 2 * numel(y) * C_in/groups * k^2, ConvTranspose2d\n"
                  "2 * numel(x) * C_out/groups * k^2, GDN and IGDN 2 * numel(x) * C, FullyConnected and\n"
                  "SoftmaxProjection likewise; other layers show \"-\" and count 0. Parameters are the trainable\n"
                  "elements. Activations: the bytes of every node's outputs at this size and batch.\n"
                  "Examples:\n"
                  "  plexus-ae summary bmshj2018-factorized\n"
                  "  plexus-ae summary my-model.json --patch 512x768 --batch 8\n"
                  "  plexus-ae summary my-model.json --plugin ./libmylayer.so");
  command->callback([options, &exit_code] { exit_code = run_summary(*options); });
}

}  // namespace plexus::ae

#include "image_evaluation.h"

#include <cmath>
#include <set>
#include <utility>

#include "plexus/builtin_layers.h"
#include "plexus/codec/autoencoder_contract.h"
#include "plexus/error.h"

namespace plexus::ae {

namespace {

// Every latent codec of a codec section (objects within objects and arrays)
// that names a context input, as [context input node, quantizer node];
// `autoregressive` is set when one of them is an autoregressive codec.
void collect_context_inputs(const nlohmann::json& section, std::vector<std::pair<std::string, std::string>>& found,
                            bool& autoregressive) {
  if (section.is_array())
    for (const nlohmann::json& element : section) collect_context_inputs(element, found, autoregressive);
  if (!section.is_object()) return;
  const auto context_input = section.find("context_input"), quantizer = section.find("quantizer");
  if (context_input != section.end() && context_input->is_string() && quantizer != section.end() &&
      quantizer->is_string()) {
    found.emplace_back(context_input->get<std::string>(), quantizer->get<std::string>());
    autoregressive = autoregressive || section.value("type", nlohmann::json()) == "autoregressive";
  }
  for (const auto& item : section.items())
    if (item.value().is_structured()) collect_context_inputs(item.value(), found, autoregressive);
}

// Runs `net` (of contexts.spec()) with each context input the decoded
// latent: `decoded`'s channels when given (one pass), else pass after pass
// that of the pass before (0 in the first), until a pass decodes what it
// was given or the passes needed are done.
void forward_in_coding_order(Net& net, Context& ctx, const DecodedContexts& contexts, const Tensor* decoded) {
  const std::vector<DecodedContexts::Input>& inputs = contexts.inputs();
  if (decoded) {
    std::int64_t channel = 0;
    for (const DecodedContexts::Input& input : inputs) {
      Tensor& blob = net.input(input.blob);
      const std::int64_t plane = blob.dim(2) * blob.dim(3);
      if (decoded->numel() < (channel + blob.dim(1)) * plane)
        throw ShapeError("the decoded latent " + shape_str(decoded->shape()) + " has no channels [" +
                         std::to_string(channel) + ", " + std::to_string(channel + blob.dim(1)) + ") for '" +
                         input.blob + "' " + shape_str(blob.shape()));
      blob.copy_from(decoded->to(DType::f32).to(Device::cpu()).elements_view(channel * plane, blob.shape()));
      channel += blob.dim(1);
    }
    net.forward(ctx);
    return;
  }
  std::vector<std::vector<double>> given;
  for (const DecodedContexts::Input& input : inputs) {
    net.input(input.blob).fill_zero();
    given.emplace_back(static_cast<std::size_t>(net.input(input.blob).numel()), 0.0);
  }
  const Shape& latent = net.blob_shape(inputs[0].blob);
  const std::int64_t passes = contexts.passes_needed(latent.at(2) * latent.at(3));
  for (std::int64_t pass = 1;; ++pass) {
    net.forward(ctx);
    if (pass == passes) return;
    bool decoded_as_given = true;
    for (std::size_t k = 0; k < inputs.size(); ++k) {
      std::vector<double> values = net.blob(inputs[k].decoded).to_values();
      decoded_as_given = decoded_as_given && values == given[k];
      given[k] = std::move(values);
    }
    if (decoded_as_given) return;
    for (const DecodedContexts::Input& input : inputs) net.input(input.blob).copy_from(net.blob(input.decoded));
  }
}

}  // namespace

DecodedContexts::DecodedContexts(const ModelSpec& model, const Registry& registry)
    : model_(model), spec_(model), registry_(&registry) {
  std::vector<std::pair<std::string, std::string>> named;
  bool autoregressive = false;
  collect_context_inputs(model.codec, named, autoregressive);
  std::vector<Input> inputs;
  std::set<std::string> replaced;
  for (const auto& [context_input, quantizer] : named) {
    const NodeSpec* input = model.node_named(context_input);
    const NodeSpec* decoder = model.node_named(quantizer);
    if (!input || !decoder || input->type != "UniformNoise" || input->inputs.size() != 1 ||
        input->outputs.size() != 1 || decoder->type != "QuantizeAroundMean" || decoder->outputs.empty())
      return;
    inputs.push_back({input->outputs[0], decoder->outputs.back()});
    replaced.insert(context_input);
  }
  spec_.nodes.clear();
  for (const NodeSpec& node : model.nodes)
    if (!replaced.count(node.name)) spec_.nodes.push_back(node);
  for (const Input& input : inputs) spec_.inputs.push_back(input.blob);
  inputs_ = std::move(inputs);
  autoregressive_ = autoregressive;
}

std::map<std::string, Shape> DecodedContexts::input_shapes(const Shape& image_shape) const {
  std::map<std::string, Shape> shapes = codec::model_input_shapes(model_, image_shape);
  const Net probe(model_, *registry_, shapes, DType::f32, Device::cpu(), 0, InitialParameters::shapes_only);
  for (const Input& input : inputs_) shapes[input.blob] = probe.blob_shape(input.blob);
  return shapes;
}

double ms_ssim_of_images(const data::Image& a, const data::Image& b) {
  if (a.width != b.width || a.height != b.height)
    throw ShapeError("MS-SSIM of images of different sizes: " + std::to_string(a.width) + "x" +
                     std::to_string(a.height) + " and " + std::to_string(b.width) + "x" + std::to_string(b.height));
  if (a.width < codec::kMsSsimMinSide || a.height < codec::kMsSsimMinSide) return std::nan("");
  static const Registry registry = builtin_registry();
  const std::unique_ptr<Layer> layer = registry.create("MSSSIM", codec::kMsSsim, nlohmann::json::object());
  const Shape shape{1, 3, a.height, a.width};
  const auto f64 = [&](const data::Image& image) {
    return Tensor::from_values(data::image_to_tensor(image).to_values(), shape, DType::f64);
  };
  const Tensor x = f64(a), y = f64(b);
  Tensor value(Shape{}, DType::f64);
  Context ctx;
  layer->forward(ctx, {&x, &y}, {&value});
  return value.to_values().at(0);
}

ImageEvaluation evaluate_image(Net& net, Context& ctx, const data::Image& image, int stride, double level,
                               const DecodedContexts* contexts, const Tensor* decoded) {
  const int padded_width = (image.width + stride - 1) / stride * stride;
  const int padded_height = (image.height + stride - 1) / stride * stride;
  const data::Image padded = data::pad_replicate(image, padded_width, padded_height);
  const bool in_coding_order = contexts && !contexts->empty();
  const Shape image_shape{1, 3, padded_height, padded_width};
  net.reshape(in_coding_order ? contexts->input_shapes(image_shape)
                              : codec::model_input_shapes(net.spec(), image_shape));
  net.input(codec::kImage).copy_from(data::image_to_tensor(padded));
  codec::set_rate_level(ctx, net, level);
  const bool was_training = ctx.training();
  ctx.set_training(false);
  if (in_coding_order) forward_in_coding_order(net, ctx, *contexts, decoded);
  else net.forward(ctx);
  ctx.set_training(was_training);

  ImageEvaluation result;
  const double padded_pixels = static_cast<double>(padded_width) * padded_height;
  const double pixels = static_cast<double>(image.width) * image.height;
  result.bpp = net.scalar(codec::kRate) * padded_pixels / pixels;
  result.reconstruction =
      data::crop_top_left(data::tensor_to_image(net.blob(codec::kReconstruction)), image.width, image.height);
  result.psnr = data::psnr(image, result.reconstruction);
  result.ms_ssim = ms_ssim_of_images(result.reconstruction, image);
  result.mse = std::pow(10.0, -result.psnr / 10.0);
  return result;
}

}  // namespace plexus::ae

#include "plexus/codec/autoencoder_contract.h"

#include <algorithm>
#include <set>

#include "plexus/error.h"
#include "plexus/net.h"
#include "plexus/tensor_ops.h"

namespace plexus::ae {

double distortion_weight(double lambda) { return lambda * 255.0 * 255.0; }

double variable_rate_lambda(const std::vector<double>& lambdas) {
  double mean = 0;
  for (double lambda : lambdas) mean += lambda / static_cast<double>(lambdas.size());
  return mean;
}

void check_contract(const ModelSpec& spec) {
  std::string problems;
  auto add = [&](const std::string& problem) { problems += (problems.empty() ? "" : "; ") + problem; };
  const std::vector<std::string> variable_rate{kImage, kRateLevel, kMseWeight};
  if (spec.inputs != std::vector<std::string>{kImage} && spec.inputs != variable_rate) {
    std::string given;
    for (const auto& input : spec.inputs) given += (given.empty() ? "" : ", ") + ("'" + input + "'");
    add("its inputs must be exactly [\"image\"], or [\"image\", \"level\", \"mse_weight\"] for a variable-rate "
        "model, got [" +
        given + "]");
  } else if (spec.inputs == variable_rate && rate_levels(spec) == 0) {
    add("it reads \"level\" but has no GainUnit node to apply it");
  }
  std::set<std::string> produced;
  for (const auto& node : spec.nodes) produced.insert(node.outputs.begin(), node.outputs.end());
  std::string missing;
  for (const char* blob : {kReconstruction, kLikelihoods, kDistortion, kRate})
    if (!produced.count(blob)) missing += (missing.empty() ? "'" : ", '") + std::string(blob) + "'";
  if (!missing.empty()) add("no node produces " + missing);
  if (!problems.empty())
    throw ConfigError(spec.source + " does not fit plexus-ae: " + problems +
                      ". A plexus-ae model reads \"image\" and produces \"x_hat\" (reconstruction), "
                      "\"likelihoods\", \"mse\" and \"bpp\" (see apps/autoencoder/README.md)");
}

int rate_levels(const ModelSpec& spec) {
  int levels = 0;
  std::string first;
  for (const NodeSpec& node : spec.nodes) {
    if (node.type != kGainUnitType) continue;
    const auto it = node.params.find("levels");
    if (it == node.params.end() || !it->is_number_integer() || it->get<long long>() < 2 || it->get<long long>() > 1000)
      throw ConfigError(spec.source + ": GainUnit node '" + node.name + "' needs \"levels\", an integer in [2, 1000]");
    const int k = static_cast<int>(it->get<long long>());
    if (levels != 0 && k != levels)
      throw ConfigError(spec.source + ": GainUnit nodes '" + first + "' and '" + node.name + "' have " +
                        std::to_string(levels) + " and " + std::to_string(k) +
                        " levels; one variable-rate model has one set of rate levels");
    if (levels == 0) first = node.name;
    levels = k;
  }
  return levels;
}

std::map<std::string, Shape> model_input_shapes(const ModelSpec& spec, const std::string& main, const Shape& shape) {
  std::map<std::string, Shape> shapes;
  for (const std::string& input : spec.inputs) shapes[input] = input == main ? shape : Shape{shape.at(0)};
  return shapes;
}

std::map<std::string, Shape> model_input_shapes(const ModelSpec& spec, const Shape& image) {
  return model_input_shapes(spec, kImage, image);
}

void set_rate_inputs(Context& ctx, Net& net, const std::vector<double>& levels,
                     const std::vector<double>& mse_weights) {
  for (const auto& [name, values] : {std::pair{kRateLevel, &levels}, std::pair{kMseWeight, &mse_weights}}) {
    if (!net.has_input(name)) continue;
    Tensor& input = net.input(name);
    if (input.numel() != static_cast<std::int64_t>(values->size()))
      throw ShapeError(std::string("\"") + name + "\" holds " + std::to_string(input.numel()) + " value(s), given " +
                       std::to_string(values->size()));
    if (values->size() <= kMaxSetValues) set_values(ctx, input, *values);
    else input.copy_from(Tensor::from_values(*values, input.shape()));
  }
}

void set_rate_level(Context& ctx, Net& net, double level) {
  const std::size_t images = net.has_input(kRateLevel) ? static_cast<std::size_t>(net.input(kRateLevel).numel()) : 0;
  set_rate_inputs(ctx, net, std::vector<double>(images, level), std::vector<double>(images, 1.0));
}

namespace {
struct ProbeResult {
  Shape reconstruction;
  Shape latent;
  // The smallest spatial side of any [N, C, h, w] blob: the deepest latent
  // (a hyperprior's z is 4x smaller than y).
  std::int64_t smallest_side = 0;
};

ProbeResult probe(const ModelSpec& spec, const Registry& registry, std::int64_t side) {
  Net net(spec, registry, model_input_shapes(spec, Shape{1, 3, side, side}));
  ProbeResult result{net.blob(kReconstruction).shape(), net.blob(kLikelihoods).shape(), side};
  for (const NodeSpec& node : spec.nodes)
    for (const std::string& output : node.outputs) {
      const Shape& shape = net.blob(output).shape();
      if (shape.size() == 4) result.smallest_side = std::min({result.smallest_side, shape[2], shape[3]});
    }
  return result;
}
}  // namespace

int derive_stride(const ModelSpec& spec, const Registry& registry) {
  constexpr std::int64_t kProbeSide = 256;
  ProbeResult first = probe(spec, registry, kProbeSide);
  if (first.latent.size() != 4)
    throw ConfigError(spec.source + ": \"likelihoods\" must be [N, C, h, w] to derive the model's stride, got " +
                      shape_str(first.latent));
  const std::int64_t latent_side = first.latent[2];
  if (latent_side < 1 || kProbeSide % latent_side != 0 || first.latent[3] != latent_side)
    throw ConfigError(spec.source + ": cannot derive the model's stride: a " + std::to_string(kProbeSide) + "x" +
                      std::to_string(kProbeSide) + " image gives a latent of " + shape_str(first.latent));
  // The stride is set by the deepest latent: image sides must be multiples
  // of it for every latent to tile the image exactly.
  const std::int64_t deepest_side = first.smallest_side;
  if (deepest_side < 1 || kProbeSide % deepest_side != 0)
    throw ConfigError(spec.source + ": cannot derive the model's stride: a " + std::to_string(kProbeSide) + "x" +
                      std::to_string(kProbeSide) + " image gives a blob of side " + std::to_string(deepest_side));
  const std::int64_t stride = kProbeSide / deepest_side;
  const std::int64_t latent_stride = kProbeSide / latent_side;
  // A second size, three strides wide, must map exactly too.
  const std::int64_t side = 3 * stride;
  ProbeResult second = probe(spec, registry, side);
  const Shape image{1, 3, side, side};
  const std::int64_t expected_latent = side / latent_stride;
  if (second.reconstruction != image || second.latent.size() != 4 || second.latent[2] != expected_latent ||
      second.latent[3] != expected_latent)
    throw ConfigError(spec.source + ": inconsistent stride: with a derived stride of " + std::to_string(stride) +
                      ", a " + shape_str(image) + " image gives \"x_hat\" " + shape_str(second.reconstruction) +
                      " and \"likelihoods\" " + shape_str(second.latent));
  return static_cast<int>(stride);
}

}  // namespace plexus::ae

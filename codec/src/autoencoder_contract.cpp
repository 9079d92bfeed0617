#include "plexus/codec/autoencoder_contract.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "plexus/error.h"
#include "plexus/net.h"
#include "plexus/tensor_ops.h"

namespace plexus::codec {

double distortion_weight(double lambda) { return lambda * 255.0 * 255.0; }

double variable_rate_lambda(const std::vector<double>& lambdas) {
  double mean = 0;
  for (double lambda : lambdas) mean += lambda / static_cast<double>(lambdas.size());
  return mean;
}

namespace {

// The keys of `object` (at `where`) must be among `known`.
void check_keys(const nlohmann::json& object, const std::string& where, const std::vector<std::string>& known) {
  std::string expected;
  for (const std::string& key : known) expected += (expected.empty() ? "" : ", ") + key;
  for (auto it = object.begin(); it != object.end(); ++it)
    if (std::find(known.begin(), known.end(), it.key()) == known.end())
      throw ConfigError(where + ": unknown key '" + it.key() + "' (expected " + expected + ")");
}

// A finite number > 0 at `where`.
double positive_number(const nlohmann::json& value, const std::string& where) {
  if (!value.is_number() || !(value.get<double>() > 0) || !std::isfinite(value.get<double>()))
    throw ConfigError(where + " must be a number > 0, got " + value.dump());
  return value.get<double>();
}

// An array of term objects at `where`, each handed to `term` with its own "where".
template <typename Term>
void for_each_term(const nlohmann::json& terms, const std::string& where, Term&& term) {
  if (!terms.is_array()) throw ConfigError(where + " must be an array of terms, got " + terms.dump());
  for (std::size_t i = 0; i < terms.size(); ++i) {
    const std::string at = where + "/" + std::to_string(i);
    if (!terms[i].is_object()) throw ConfigError(at + " must be an object, got " + terms[i].dump());
    term(terms[i], at);
  }
}

double term_weight(const nlohmann::json& term, const std::string& at) {
  return term.contains("weight") ? positive_number(term["weight"], at + "/weight") : 1.0;
}

}  // namespace

double TrainingLoss::distortion_weight(const std::string& type) const {
  double weight = 0;
  for (const DistortionTerm& term : distortion)
    if (term.type == type) weight += term.weight;
  return weight;
}

TrainingLoss training_loss(const ModelSpec& spec) {
  TrainingLoss loss;
  const std::string where = spec.source + ": at /loss";
  const nlohmann::json& section = spec.loss;
  if (!section.is_null() && !section.is_object())
    throw ConfigError(where + ": the loss must be an object, got " + section.dump());
  if (section.is_object()) check_keys(section, where, {"distortion", "rate", "lambda", "lambdas"});
  const bool has = section.is_object();
  if (has && section.contains("distortion")) {
    for_each_term(section["distortion"], where + "/distortion", [&](const nlohmann::json& term, const std::string& at) {
      check_keys(term, at, {"type", "weight"});
      if (!term.contains("type")) throw ConfigError(at + ": missing \"type\" (\"mse\" or \"ms_ssim\")");
      const nlohmann::json& type = term["type"];
      if (!type.is_string() || (type != "mse" && type != kMsSsim))
        throw ConfigError(at + "/type: unknown distortion " + type.dump() + " (expected \"mse\" or \"ms_ssim\")");
      loss.distortion.push_back({type.get<std::string>(), term_weight(term, at)});
    });
    if (loss.distortion.empty())
      throw ConfigError(where + "/distortion is empty: give at least one term, e.g. {\"type\": \"mse\"}");
  } else {
    loss.distortion.push_back({kDistortion, 1.0});
  }
  std::set<std::string> produced;
  for (const auto& node : spec.nodes) produced.insert(node.outputs.begin(), node.outputs.end());
  if (has && section.contains("rate")) {
    for_each_term(section["rate"], where + "/rate", [&](const nlohmann::json& term, const std::string& at) {
      check_keys(term, at, {"blob", "weight"});
      if (!term.contains("blob") || !term["blob"].is_string())
        throw ConfigError(at + ": needs \"blob\", the name of a scalar rate the spec produces (e.g. \"bpp\")");
      const std::string blob = term["blob"].get<std::string>();
      if (!produced.count(blob)) throw ConfigError(at + "/blob: no node produces '" + blob + "'");
      loss.rate.push_back({blob, term_weight(term, at)});
    });
  } else {
    loss.rate.push_back({kRate, 1.0});
  }
  if (has && section.contains("lambda")) loss.lambda = positive_number(section["lambda"], where + "/lambda");
  if (has && section.contains("lambdas")) {
    const nlohmann::json& lambdas = section["lambdas"];
    if (!lambdas.is_array() || lambdas.empty())
      throw ConfigError(where + "/lambdas must be an array of numbers > 0, one per rate level, got " + lambdas.dump());
    for (std::size_t k = 0; k < lambdas.size(); ++k)
      loss.lambdas.push_back(positive_number(lambdas[k], where + "/lambdas/" + std::to_string(k)));
  }
  if (loss.distortion_weight(kMsSsim) > 0) {
    if (std::find(spec.inputs.begin(), spec.inputs.end(), kRateLevel) != spec.inputs.end())
      throw ConfigError(where + ": an \"ms_ssim\" distortion weights every image alike; a variable-rate model "
                                "(it reads \"level\") trains with \"mse\" alone");
    const bool named =
        std::any_of(spec.nodes.begin(), spec.nodes.end(), [](const NodeSpec& node) { return node.name == kMsSsim; });
    if (named || produced.count(kMsSsim))
      throw ConfigError(where + ": an \"ms_ssim\" distortion adds a node and blob named \"ms_ssim\", which the "
                                "spec already has; rename its own");
  }
  return loss;
}

ModelSpec training_spec(const ModelSpec& spec, const TrainingLoss& loss) {
  ModelSpec result = spec;
  if (loss.distortion_weight(kMsSsim) > 0)
    result.add_node({kMsSsim, "MSSSIM", {kReconstruction, kImage}, {kMsSsim}, nlohmann::json::object()});
  return result;
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
  training_loss(spec);
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
  // Shapes only: the probe's parameters would take as much memory as the weights.
  Net net(spec, registry, model_input_shapes(spec, Shape{1, 3, side, side}), DType::f32, Device::cpu(), 0,
          InitialParameters::shapes_only);
  ProbeResult result{net.blob_shape(kReconstruction), net.blob_shape(kLikelihoods), side};
  for (const NodeSpec& node : spec.nodes)
    for (const std::string& output : node.outputs) {
      const Shape& shape = net.blob_shape(output);
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

}  // namespace plexus::codec

#include "plexus/flop_count.h"

namespace plexus {

namespace {

double numel(const Shape& shape) { return static_cast<double>(shape_numel(shape)); }

// k^2 of a convolution's square "kernel" of side k.
double kernel_area(const nlohmann::json& params) {
  const double side = params.value("kernel", 1.0);
  return side * side;
}

double groups(const nlohmann::json& params) { return params.value("groups", 1.0); }

}  // namespace

std::optional<double> forward_flops(const std::string& type, const nlohmann::json& params,
                                    const std::vector<Shape>& inputs, const std::vector<Shape>& outputs) {
  if (inputs.empty() || outputs.empty()) return std::nullopt;
  const Shape& x = inputs[0];
  const Shape& y = outputs[0];
  if (type == "Conv2d" && x.size() == 4) return 2.0 * numel(y) * (double(x[1]) / groups(params)) * kernel_area(params);
  if (type == "ConvTranspose2d" && y.size() == 4)
    return 2.0 * numel(x) * (double(y[1]) / groups(params)) * kernel_area(params);
  if ((type == "GDN" || type == "IGDN") && x.size() >= 2) return 2.0 * numel(x) * double(x[1]);
  if (type == "FullyConnected" && !x.empty()) return 2.0 * numel(y) * (numel(x) / double(x[0]));
  if (type == "SoftmaxProjection" && !x.empty()) return 2.0 * numel(x) * params.value("vocab_size", 0.0);
  return std::nullopt;
}

}  // namespace plexus

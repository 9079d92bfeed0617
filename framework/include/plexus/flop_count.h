#pragma once
// FLOPs of one forward pass of a node, from its layer type, params and
// shapes: what `plexus-ae summary` lists per node, and the benchmark's
// FLOP floors. A multiply-add counts as 2 FLOPs. Only the matrix
// products are counted (they are where the time goes); element-wise layers,
// normalisations' squares and roots, and the entropy models' small
// per-channel maps count none.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "plexus/tensor.h"

namespace plexus {

// The forward FLOPs of a node of `type` with `params` reading `inputs` and
// writing `outputs` (the shapes the Net inferred), for the types below;
// std::nullopt for every other type. With g = params "groups" (default 1):
//   Conv2d           2 * numel(y) * (C_in / g) * k^2  (k = params "kernel")
//   ConvTranspose2d  2 * numel(x) * (C_out / g) * k^2  (the Conv2d from y to x)
//   GDN, IGDN        2 * numel(x) * C  (the C x C mixing of x^2 at each pixel)
//   FullyConnected   2 * numel(y) * F  (F = numel(x) / N, features per batch item)
//   SoftmaxProjection 2 * N * F * V    (the projection to V = params "vocab_size")
inline std::optional<double> forward_flops(const std::string& type, const nlohmann::json& params,
                                           const std::vector<Shape>& inputs, const std::vector<Shape>& outputs) {
  if (inputs.empty() || outputs.empty()) return std::nullopt;
  const Shape& x = inputs[0];
  const Shape& y = outputs[0];
  auto numel = [](const Shape& shape) { return static_cast<double>(shape_numel(shape)); };
  // (C / g) * k^2: the multiply-adds of one output (Conv2d) or input (ConvTranspose2d) element.
  auto taps = [&](std::int64_t channels) {
    const double side = params.value("kernel", 1.0);
    return double(channels) / params.value("groups", 1.0) * side * side;
  };
  if (type == "Conv2d" && x.size() == 4) return 2.0 * numel(y) * taps(x[1]);
  if (type == "ConvTranspose2d" && y.size() == 4) return 2.0 * numel(x) * taps(y[1]);
  if ((type == "GDN" || type == "IGDN") && x.size() >= 2) return 2.0 * numel(x) * double(x[1]);
  if (type == "FullyConnected" && !x.empty()) return 2.0 * numel(y) * (numel(x) / double(x[0]));
  if (type == "SoftmaxProjection" && !x.empty()) return 2.0 * numel(x) * params.value("vocab_size", 0.0);
  // C [..., M, P] = op(A) [..., M, K] op(B) [..., K, P]: K is A's last dimension, or its second last when transposed.
  if (type == "MatMul" && x.size() >= 2) {
    const double k = params.value("transpose_a", false) ? double(x[x.size() - 2]) : double(x.back());
    return 2.0 * numel(y) * k;
  }
  return std::nullopt;
}

}  // namespace plexus

#pragma once
// Parameter: a learnable tensor, its gradient and the named rule that
// initialises it.
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "plexus/tensor.h"

namespace plexus {

struct Initializer {
  std::string name;  // e.g. "uniform(-0.1, 0.1)"; shown in summaries
  // Fills `values` (row-major, shape_numel(shape) long) on the host in f64.
  std::function<void(std::vector<double>& values, const Shape& shape, std::mt19937_64& rng)> fill;
};

namespace init {
Initializer constant(double value);
Initializer uniform(double low, double high);
Initializer normal(double mean, double stddev);
// U(-b, b) with b = sqrt(6 / (fan_in + fan_out)) (Glorot & Bengio 2010).
Initializer xavier_uniform(std::int64_t fan_in, std::int64_t fan_out);
// U(-b, b) with b = 1 / sqrt(fan_in), PyTorch's default for Conv2d/Linear bias.
Initializer fan_in_uniform(std::int64_t fan_in);
Initializer custom(std::string name, std::function<void(std::vector<double>&, const Shape&, std::mt19937_64&)> fill);
}  // namespace init

struct Parameter {
  std::string name;  // local to its layer: "weight", "beta", ...
  Shape shape;
  Initializer initializer;
  Tensor value;
  Tensor grad;  // backward accumulates into it; zero it before each step
  // false for a buffer (Layer::declare_buffer): state the layer keeps with
  // its parameters and in checkpoints (a pruning mask) that no optimiser
  // updates, no gradient clipper counts and no gradient check perturbs.
  bool trainable = true;
};

}  // namespace plexus

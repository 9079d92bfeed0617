#include "plexus/parameter.h"

#include <cmath>
#include <sstream>

namespace plexus::init {

namespace {
std::string format(const char* name, double a, double b) {
  std::ostringstream out;
  out << name << "(" << a << ", " << b << ")";
  return out.str();
}
}  // namespace

Initializer constant(double value) {
  std::ostringstream name;
  name << "constant(" << value << ")";
  return {name.str(),
          [value](std::vector<double>& v, const Shape&, std::mt19937_64&) { std::fill(v.begin(), v.end(), value); }};
}

Initializer uniform(double low, double high) {
  return {format("uniform", low, high), [low, high](std::vector<double>& v, const Shape&, std::mt19937_64& rng) {
            std::uniform_real_distribution<double> dist(low, high);
            for (auto& x : v) x = dist(rng);
          }};
}

Initializer normal(double mean, double stddev) {
  return {format("normal", mean, stddev), [mean, stddev](std::vector<double>& v, const Shape&, std::mt19937_64& rng) {
            std::normal_distribution<double> dist(mean, stddev);
            for (auto& x : v) x = dist(rng);
          }};
}

Initializer xavier_uniform(std::int64_t fan_in, std::int64_t fan_out) {
  double bound = std::sqrt(6.0 / static_cast<double>(fan_in + fan_out));
  Initializer result = uniform(-bound, bound);
  result.name = "xavier_uniform(fan_in=" + std::to_string(fan_in) + ", fan_out=" + std::to_string(fan_out) + ")";
  return result;
}

Initializer fan_in_uniform(std::int64_t fan_in) {
  double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
  Initializer result = uniform(-bound, bound);
  result.name = "fan_in_uniform(fan_in=" + std::to_string(fan_in) + ")";
  return result;
}

Initializer custom(std::string name, std::function<void(std::vector<double>&, const Shape&, std::mt19937_64&)> fill) {
  return {std::move(name), std::move(fill)};
}

}  // namespace plexus::init

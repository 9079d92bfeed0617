#pragma once
// Every element of every trainable parameter gradient of an f64 Net against
// central differences of its loss: for the tests of how a Net routes
// gradients between its nodes (shared storage, fused activations).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "plexus/net.h"

namespace plexus::test {

struct CentralDifferences {
  double step;       // moved each way, per parameter element
  double tolerance;  // relative to the largest of |analytic|, |numeric| and `floor`
  double floor;
};

// loss() runs forward and returns the loss; backward() runs forward,
// zeroes the parameter gradients and backpropagates that loss. A second
// backward() then gives the same gradients (the Net reuses its buffers).
inline void expect_parameter_gradients_match_central_differences(Net& net, const std::function<double()>& loss,
                                                                 const std::function<void()>& backward,
                                                                 const CentralDifferences& check) {
  backward();
  std::map<std::string, std::vector<double>> analytic;
  for (const NamedParameter& p : net.trainable_parameters()) analytic[p.name] = p.parameter->grad.to_values();
  for (const NamedParameter& p : net.trainable_parameters()) {
    std::vector<double> values = p.parameter->value.to_values();
    for (std::size_t k = 0; k < values.size(); ++k) {
      auto loss_at = [&](double value) {
        std::vector<double> moved = values;
        moved[k] = value;
        p.parameter->value.copy_from(Tensor::from_values(moved, p.parameter->value.shape(), DType::f64));
        return loss();
      };
      const double numeric = (loss_at(values[k] + check.step) - loss_at(values[k] - check.step)) / (2 * check.step);
      const double expected = analytic[p.name][k];
      EXPECT_NEAR(expected, numeric, check.tolerance * std::max({std::abs(expected), std::abs(numeric), check.floor}))
          << p.name << "[" << k << "]";
    }
    p.parameter->value.copy_from(Tensor::from_values(values, p.parameter->value.shape(), DType::f64));
  }
  backward();
  for (const NamedParameter& p : net.trainable_parameters())
    EXPECT_EQ(p.parameter->grad.to_values(), analytic[p.name]) << p.name;
}

}  // namespace plexus::test

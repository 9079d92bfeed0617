#pragma once
// Compares every tensor of two safetensors files (checkpoints, models).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "plexus/checkpoint.h"

namespace plexus::testing {

// Same names, shapes, dtypes and bytes; metadata is not compared.
inline ::testing::AssertionResult same_tensors(const std::string& a_path, const std::string& b_path) {
  TensorFile a = load_safetensors(a_path), b = load_safetensors(b_path);
  if (a.tensors.size() != b.tensors.size())
    return ::testing::AssertionFailure() << a.tensors.size() << " vs " << b.tensors.size() << " tensors";
  for (const auto& [name, tensor] : a.tensors) {
    auto it = b.tensors.find(name);
    if (it == b.tensors.end()) return ::testing::AssertionFailure() << name << " missing from " << b_path;
    const Tensor& other = it->second;
    if (tensor.shape() != other.shape() || tensor.dtype() != other.dtype())
      return ::testing::AssertionFailure() << name << ": " << tensor.describe() << " vs " << other.describe();
    if (std::memcmp(tensor.raw_data(), other.raw_data(), tensor.nbytes()) != 0)
      return ::testing::AssertionFailure() << name << " differs";
  }
  return ::testing::AssertionSuccess() << a.tensors.size() << " tensors identical";
}

// The largest absolute difference between elements of equally named
// tensors; infinity when the names, shapes or dtypes differ.
inline double largest_difference(const std::string& a_path, const std::string& b_path) {
  TensorFile a = load_safetensors(a_path), b = load_safetensors(b_path);
  const double mismatch = std::numeric_limits<double>::infinity();
  if (a.tensors.size() != b.tensors.size()) return mismatch;
  double largest = 0;
  for (const auto& [name, tensor] : a.tensors) {
    auto it = b.tensors.find(name);
    if (it == b.tensors.end() || it->second.shape() != tensor.shape() || it->second.dtype() != tensor.dtype())
      return mismatch;
    const auto x = tensor.to_values(), y = it->second.to_values();
    for (std::size_t i = 0; i < x.size(); ++i) largest = std::max(largest, std::abs(x[i] - y[i]));
  }
  return largest;
}

}  // namespace plexus::testing

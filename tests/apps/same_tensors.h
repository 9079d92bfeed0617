#pragma once
// Compares every tensor of two safetensors files (checkpoints, models).
#include <gtest/gtest.h>

#include <cstring>
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

}  // namespace plexus::testing

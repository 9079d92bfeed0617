#pragma once
// The pieces of a codec model's fingerprint (CodecModel::fingerprint,
// docs/bitstream.md): FNV-1a 64 over the weights, the coding tables and a
// hyperprior's integer network, in a fixed byte layout.
#include <cstdint>
#include <string>
#include <vector>

#include "plexus/checksum.h"
#include "plexus/codec/gaussian_tables.h"
#include "plexus/codec/integer_network.h"
#include "plexus/tensor.h"

namespace plexus::codec {

// The name, the shape (each dimension as a 64-bit integer) and the f32 values.
void hash_tensor(plexus::Fnv1a64& hash, const std::string& name, const Tensor& tensor);

// The length as a 64-bit integer, then the values' bytes.
template <typename T>
void hash_values(plexus::Fnv1a64& hash, const std::vector<T>& values) {
  const std::uint64_t count = values.size();
  hash.add(&count, sizeof count);
  hash.add(values.data(), values.size() * sizeof(T));
}

// A hyperprior's integer parts: the integer network, the scale table and
// every Gaussian table.
void hash_hyperprior(plexus::Fnv1a64& hash, const codec::IntegerNetwork& network,
                     const codec::GaussianTables& gaussian);

}  // namespace plexus::codec

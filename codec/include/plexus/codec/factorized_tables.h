#pragma once
// Entropy-coding tables for a FactorizedEntropyModel: what turns its learned
// per-channel densities into integer tables the rANS coder (plexus/codec/rans.h)
// codes rounded latents with.
//
// Per channel c, from the cumulative c_c(x) evaluated in f64:
//   q_lo, q_med, q_hi: the x with c_c(x) = tail_mass / 2, 1/2, 1 - tail_mass / 2,
//     found by bisection on the logit (c_c is increasing by construction, so
//     bisection always converges, needs no training, and also serves models
//     trained before tables existed; CompressAI instead learns the quantiles
//     with an auxiliary loss during training);
//   m_c = round(q_med), the integer median; lo = floor(q_lo + 1/2), hi =
//     ceil(q_hi - 1/2), so the tails below lo - 1/2 and above hi + 1/2 hold at
//     most tail_mass / 2 each; at most kMaxTableSymbols values around m_c;
//   symbols s = y_hat - m_c for the rounded latent y_hat in [lo, hi], with
//     probabilities P(s) = c_c(m_c + s + 1/2) - c_c(m_c + s - 1/2) (the layer's
//     likelihood, taken on the tail side of the sigmoid), and an escape
//     symbol of probability c_c(lo - 1/2) + 1 - c_c(hi + 1/2) for the rest;
//   quantised to 16-bit frequencies by codec::quantize_table.
// The median is rounded to an integer so that y_hat = m_c + s is exactly the
// rounded latent the model was evaluated on: decoding reproduces the eval
// reconstruction bit for bit.
//
// Stored in a model's safetensors file as exact integers in f32 tensors:
//   <prefix>median [C], <prefix>offset [C] (the lowest symbol, lo - m_c),
//   <prefix>cdf_length [C] (symbols + 2), <prefix>cdf [C, longest]
//   (each row padded with 65536 after its length).
#include <cstdint>
#include <string>
#include <vector>

#include "plexus/checkpoint.h"
#include "plexus/codec/rans.h"

namespace plexus::layers {
class FactorizedEntropyModel;  // layers/factorized_entropy_model/factorized_entropy_model.h
}  // namespace plexus::layers

namespace plexus::codec {

inline constexpr double kDefaultTailMass = 1e-9;

struct FactorizedCodingTables {
  std::vector<std::int32_t> medians;  // m_c
  std::vector<CodingTable> tables;    // over s = y_hat - m_c
  std::int64_t channels() const { return static_cast<std::int64_t>(medians.size()); }
};

// Throws ConfigError when a channel's density is degenerate (a quantile
// beyond +-2^20, or not finite).
FactorizedCodingTables build_coding_tables(const layers::FactorizedEntropyModel& model,
                                           double tail_mass = kDefaultTailMass);

// Tensor names for the entropy model node `node`: "<node>.coding."
std::string coding_tables_prefix(const std::string& node);
bool has_coding_tables(const TensorFile& file, const std::string& prefix);
void store_coding_tables(const FactorizedCodingTables& tables, const std::string& prefix, TensorFile& file);
// Validates every tensor and table (shapes, integers, ranges, check_table);
// throws IoError starting with `who` (e.g. the file name).
FactorizedCodingTables load_coding_tables(const TensorFile& file, const std::string& prefix, std::int64_t channels,
                                          const std::string& who);

}  // namespace plexus::codec

#pragma once
// Coding tables for a latent modelled as a discretised zero-mean Gaussian
// whose scale comes from a hyperprior (Ballé et al. 2018, "Variational image
// compression with a scale hyperprior"). As in CompressAI, the predicted
// scale is not used directly: the encoder and the decoder pick an entry of a
// fixed log-spaced scale table (by index, see integer_network.h), and each
// entry has one precomputed table for the rANS coder (rans.h).
//
// Scale table: sigma_i = exp(log(min) + i (log(max) - log(min)) / (levels - 1)),
// i = 0..levels-1 (CompressAI: 64 levels from 0.11 to 256).
// Table of sigma, over the symbols s = y_hat - mean in [-n, n]:
//   P(s) = Phi((s + 1/2) / sigma) - Phi((s - 1/2) / sigma), computed on the
//     tail side, Phi(-|s| + 1/2) - Phi(-|s| - 1/2) for s != 0, with
//     Phi(x) = erfc(-x / sqrt 2) / 2, in f64;
//   n the smallest integer with 2 Phi(-(n + 1/2) / sigma) <= tail_mass (at
//     most kMaxTableSymbols / 2), and that mass is the escape's, so any
//     32-bit symbol is codable;
//   quantised to 16-bit frequencies by quantize_table (every frequency >= 1).
// The tables depend only on (min, max, levels, tail_mass); the model
// fingerprint covers them, so a machine whose erfc rounds differently
// could never decode a file into the wrong latent, only refuse it.
#include <cstdint>
#include <vector>

#include "plexus/codec/rans.h"

namespace plexus::codec {

inline constexpr double kScaleTableMin = 0.11;
inline constexpr double kScaleTableMax = 256;
inline constexpr int kScaleTableLevels = 64;
inline constexpr double kGaussianTailMass = 1e-9;

std::vector<double> log_scale_table(double min = kScaleTableMin, double max = kScaleTableMax,
                                    int levels = kScaleTableLevels);

struct GaussianTables {
  std::vector<double> scales;       // the scale table
  std::vector<CodingTable> tables;  // one per scale, over s = y_hat - mean
};

// Throws ConfigError for a scale table that is not positive, finite and
// increasing, or a tail mass outside (0, 1).
GaussianTables build_gaussian_tables(const std::vector<double>& scales, double tail_mass = kGaussianTailMass);

}  // namespace plexus::codec

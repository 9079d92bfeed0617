#pragma once
// The parts of a scale-hyperprior codec model that a factorized one lacks:
// the hyper-synthesis h_s read from the spec and the weights as float
// layers, its integer version (plexus/codec/integer_network.h) stored in the
// model file, and its calibration.
//
// h_s must be the chain the bundled specs use: ConvTranspose2d or Conv2d
// layers with a ReLU between each two (and optionally one after the last),
// from the hyper-latent z_hat to the scales of the GaussianConditional.
//
// The integer network is not stored: it is derived at load from the stored
// weights and a stored calibration by codec::quantize_network, whose every
// operation is an IEEE-754 f64 operation with one correctly rounded result
// (products, quotients, max, nearbyint, floor, frexp, ldexp; no sums, so
// no FMA contraction or summation order can enter), so every machine derives
// the same integers. The calibration, with prefix "<GaussianConditional node>.coding.":
//   <prefix>scale_table [L] f64          the scale table (exp() is not exact everywhere)
//   <prefix>activation_max<l> [O_l] f64  hidden layer l's calibrated ReLU maxima
//   <prefix>activation_headroom [1] f64
// About 2 KB, against the megabytes integer weights would take.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "plexus/codec/factorized_tables.h"
#include "plexus/checkpoint.h"
#include "plexus/codec/integer_network.h"
#include "plexus/codec/integer_network_quantizer.h"
#include "plexus/model_spec.h"

namespace plexus::ae {

// Why `nodes` (in graph order, from the hyper-latent to the scales) are not
// such a chain, naming the node at fault ("the hyper-synthesis (...) must be
// a chain of ...; node 'h_s1' is a Sigmoid where a ReLU belongs"); nullopt
// when they are. Judged from the spec alone, without weights.
std::optional<std::string> hyper_synthesis_problem(const std::vector<NodeSpec>& nodes);

// The float layers of h_s (the chain checked by hyper_synthesis_problem
// first): `nodes` (in graph order) computing the scales from
// the hyper-latent, weights "<node>.weight" / "<node>.bias" from `file`.
// ConfigError when the nodes are not such a chain, IoError for missing or
// misshapen tensors (messages start with `who`).
std::vector<codec::FloatConvLayer> float_hyper_synthesis(const std::vector<NodeSpec>& nodes, const TensorFile& file,
                                                         const std::string& who);

std::string integer_network_prefix(const std::string& gaussian_node);  // "<node>.coding."

struct HyperSynthesisCalibration {
  codec::ActivationRanges ranges;
  std::vector<double> scale_table;
  double headroom = codec::kDefaultActivationHeadroom;
};
bool has_calibration(const TensorFile& file, const std::string& prefix);
void store_calibration(const HyperSynthesisCalibration& calibration, const std::string& prefix, TensorFile& file);
// Validates every tensor against `layers` (counts, finite, non-negative,
// an increasing positive scale table); IoError starting with `who`.
HyperSynthesisCalibration load_calibration(const TensorFile& file, const std::string& prefix,
                                           const std::vector<codec::FloatConvLayer>& layers, const std::string& who);
// quantize_network of the calibration (IoError starting with `who` when it fails).
codec::IntegerNetwork integer_hyper_synthesis(const std::vector<codec::FloatConvLayer>& layers,
                                              const HyperSynthesisCalibration& calibration, const std::string& who);

// `count` hyper-latents [C, side, side] drawn from the factorized coding
// tables (each element independently, by a fixed-seed mt19937_64, an escape
// drawing the table's last symbol): calibration inputs when no images are given.
std::vector<std::vector<std::int32_t>> prior_samples(const codec::FactorizedCodingTables& tables, int count,
                                                     int side, std::uint64_t seed = 1);

}  // namespace plexus::ae

#pragma once
// The parts of a hyperprior codec model that a factorized one lacks: the
// entropy-parameter graph (the spec's nodes from the hyper-latent z_hat to
// the GaussianConditional's scales and, for a mean-scale hyperprior, its
// means) as a float network with the file's weights, its integer version
// (plexus/codec/integer_network.h), and its calibration.
//
// The graph has an integer form when every node on those paths is a
// Conv2d, a ConvTranspose2d, a ReLU or LeakyReLU (negative slope 0..1) that
// reads a convolution's output (directly or through Concat/Split), a Concat
// or a Split. A channel-conditional model's graph also reads the slices'
// rounded latents and gives the decoded latent: there a Tanh may read a
// convolution's output (latent residual prediction) and an Add may add two
// of the fixed-point values (a rounded latent, a Tanh's output, their sums),
// and slice k's scales and means must not read slice k or a later one; a
// checkerboard model's graph reads the decoded anchors (one rounded latent)
// and may mask by the checkerboard (CheckerboardMask). A convolution that reads another's output
// directly gets a rescale without activation function; a ReLU that gives the scales is absorbed into the thresholds
// (they are positive, so acc > T is the same test on max(acc, 0)).
//
// The integer network is not stored: it is derived at load from the stored
// weights and a stored calibration by codec::quantize_network, whose every
// operation is an IEEE-754 f64 operation with one correctly rounded result,
// so every machine derives the same integers. The calibration, with prefix
// "<GaussianConditional node>.coding.":
//   <prefix>scale_table [L] f64          the scale table (exp() is not exact everywhere)
//   <prefix>activation_max<l> [C_l] f64  rescale node l's calibrated |output| maxima
//   <prefix>activation_headroom [1] f64
//   <prefix>tanh_table [L] f64            tanh(i / 2^10) (models with Tanh nodes)
// A few KB, against the megabytes integer weights would take.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "plexus/checkpoint.h"
#include "plexus/codec/factorized_tables.h"
#include "plexus/codec/integer_network.h"
#include "plexus/codec/integer_network_quantizer.h"
#include "plexus/model_spec.h"

namespace plexus::codec {

// Where the entropy parameters come from and go to.
struct EntropyParameterBlobs {
  std::string hyper_latent;  // z_hat
  std::string scales;        // the GaussianConditional's second input
  std::string means;         // its third, or empty
  // A channel-conditional model: each slice's rounded latent (the second
  // output of its QuantizeAroundMean), in coding order, with its channels,
  // and the decoded latent the synthesis reads.
  std::vector<std::string> rounded;
  std::vector<std::int32_t> rounded_channels;
  // Channel groups coded as checkerboards: group k's context input, the
  // same decoded values as rounded[k] (the network's input k).
  std::vector<std::string> context_inputs;
  std::string decoded;
};

// Why `nodes` (the spec's nodes computing the scales and means from the
// hyper-latent) have no integer form, naming the node at fault ("node
// 'h_s1' is a Sigmoid, which has no exact integer form; ..."); nullopt when
// they have one. Judged from the spec alone, without weights.
std::optional<std::string> entropy_parameters_problem(const std::vector<NodeSpec>& nodes,
                                                      const EntropyParameterBlobs& blobs);

// The float network of those nodes, weights "<node>.weight" / "<node>.bias"
// from `file`. ConfigError when the graph has no integer form, IoError for
// missing or misshapen tensors (messages start with `who`).
codec::FloatNetwork float_entropy_parameters(const std::vector<NodeSpec>& nodes, const EntropyParameterBlobs& blobs,
                                             const TensorFile& file, const std::string& who);
// The same, erasing each weight and bias from `file` once read, so that the
// file's copy of them is freed as the network's grows (loading a model whose
// entropy parameters are most of its weights).
codec::FloatNetwork take_float_entropy_parameters(const std::vector<NodeSpec>& nodes,
                                                  const EntropyParameterBlobs& blobs, TensorFile& file,
                                                  const std::string& who);

std::string integer_network_prefix(const std::string& gaussian_node);  // "<node>.coding."

struct IntegerNetworkCalibration {
  codec::ActivationRanges ranges;
  std::vector<double> scale_table;
  double headroom = codec::kDefaultActivationHeadroom;
  std::vector<double> tanh_table;  // empty without Tanh nodes
};
// tanh(i / 2^10) for i = 0 .. 2^13 - 1 (tanh(8) is 1 within 2^-22).
std::vector<double> unit_tanh_table();
bool has_calibration(const TensorFile& file, const std::string& prefix);
void store_calibration(const IntegerNetworkCalibration& calibration, const std::string& prefix, TensorFile& file);
// Validates every tensor against `network` (counts, finite, non-negative,
// an increasing positive scale table); IoError starting with `who`.
IntegerNetworkCalibration load_calibration(const TensorFile& file, const std::string& prefix,
                                           const codec::FloatNetwork& network, const std::string& who);
// quantize_network of the calibration (IoError starting with `who` when it
// fails). Takes the network by value: a caller done with it moves it in.
codec::IntegerNetwork integer_entropy_parameters(codec::FloatNetwork network,
                                                 const IntegerNetworkCalibration& calibration, const std::string& who);

// `count` hyper-latents [C, side, side] drawn from the factorized coding
// tables (each element independently, by a fixed-seed mt19937_64, an escape
// drawing the table's last symbol): calibration inputs when no images are given.
std::vector<std::vector<std::int32_t>> prior_samples(const codec::FactorizedCodingTables& tables, int count, int side,
                                                     std::uint64_t seed = 1);

}  // namespace plexus::codec

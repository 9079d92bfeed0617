#pragma once
// Channel groups coded as checkerboards (He et al. 2022, ELIC's
// space-channel context model; a "channel_groups" latent codec whose groups
// hold checkerboard keys, ModelKind::grouped_checkerboard). The latent's
// channels are cut into groups coded one after the other, and each group in
// two passes over all its positions at once:
//   pass 0, the anchors ((row + column) even): parameters from z and the
//     groups decoded before, the group's own input 0;
//   pass 1, the other positions: the same, with the group's decoded anchors
//     (symbol * 2^16 + mean, the others 0) as its input;
// then the whole decoded group becomes its input for the groups after it.
// Stream 2k + p of the latent (after z's) holds group k's pass p, its
// elements in the latent's order (channel, row, column).
#include <cstddef>
#include <cstdint>
#include <functional>
#include <random>
#include <vector>

#include "plexus/codec/codec_model.h"
#include "plexus/codec/integer_network.h"
#include "plexus/codec/integer_network_quantizer.h"

namespace plexus::codec {

// Whether latent element n of a [C, height, width] latent is an anchor.
inline bool is_checkerboard_anchor(std::size_t n, std::size_t plane, std::size_t width) {
  const std::size_t position = n % plane;
  return (position / width + position % width) % 2 == 0;
}

// The latent elements of each stream, 2k + p for group k's pass p, in
// coding order; `group_channels` the channels of each group.
std::vector<std::vector<std::size_t>> grouped_checkerboard_streams(const std::vector<std::int32_t>& group_channels,
                                                                   std::size_t height, std::size_t width);

// symbols(stream, the latent elements it codes, their indices and means): the
// encoder's from y, the decoder's from the stream.
using StreamSymbols = std::function<std::vector<std::int32_t>(std::size_t, const std::vector<std::size_t>&,
                                                              const codec::IntegerOutputs&)>;

// Every group's two passes through `runner` (started on the image's
// hyper-latent), filling latents.indices, symbols and means ([C, h, w]);
// on return every group's input holds its decoded values.
void code_grouped_checkerboard(codec::IntegerNetworkRunner& runner, std::size_t height, std::size_t width,
                               CodecModel::Latents& latents, const StreamSymbols& symbols);

// The calibration's evaluation of one sample, as the codec runs it: group by
// group, the anchors' pass, the other positions' (their rounded latent
// round(y - mean) + mean from `latent` [C, h, w], or when it is empty
// mean + round(scale * N(0, 1))), then the decoded latent.
void calibrate_grouped_checkerboard(const codec::FloatNetwork& network, codec::FloatEvaluation& evaluation,
                                    std::int64_t hyper_height, std::int64_t hyper_width,
                                    const std::vector<float>& latent, std::mt19937_64& random);

}  // namespace plexus::codec

#include "grouped_checkerboard_coding.h"

#include <algorithm>
#include <cmath>

#include "network_structure.h"

namespace plexus::codec {

std::vector<std::vector<std::size_t>> grouped_checkerboard_streams(const std::vector<std::int32_t>& group_channels,
                                                                   std::size_t height, std::size_t width) {
  const std::size_t plane = height * width;
  std::vector<std::vector<std::size_t>> streams;
  std::size_t first = 0;
  for (std::int32_t channels : group_channels) {
    const std::size_t last = first + static_cast<std::size_t>(channels) * plane;
    for (int pass = 0; pass < 2; ++pass) {
      std::vector<std::size_t> elements;
      elements.reserve((last - first + 1 - pass) / 2 + 1);
      for (std::size_t n = first; n < last; ++n)
        if (is_checkerboard_anchor(n, plane, width) == (pass == 0)) elements.push_back(n);
      streams.push_back(std::move(elements));
    }
    first = last;
  }
  return streams;
}

void code_grouped_checkerboard(codec::IntegerNetworkRunner& runner, std::size_t height, std::size_t width,
                               CodecModel::Latents& latents, const StreamSymbols& symbols) {
  const std::vector<std::int32_t>& groups = runner.groups();
  const std::vector<std::vector<std::size_t>> streams = grouped_checkerboard_streams(groups, height, width);
  const std::size_t plane = height * width;
  std::size_t count = 0;
  for (std::int32_t channels : groups) count += static_cast<std::size_t>(channels) * plane;
  latents.indices.assign(count, 0);
  latents.symbols.assign(count, 0);
  latents.means.assign(count, 0);
  std::size_t first = 0;
  for (std::size_t k = 0; k < groups.size(); ++k) {
    // Group k's input: 0 for the anchors' pass, the decoded anchors for the others', the whole group after.
    std::vector<std::int64_t> rounded(static_cast<std::size_t>(groups[k]) * plane, 0);
    for (std::size_t pass = 0; pass < 2; ++pass) {
      runner.set_input(static_cast<std::int32_t>(k), rounded);
      const codec::IntegerOutputs all = runner.outputs(static_cast<std::int32_t>(k));
      const std::vector<std::size_t>& elements = streams[2 * k + pass];
      codec::IntegerOutputs outputs;
      outputs.indices.reserve(elements.size());
      outputs.means.reserve(elements.size());
      for (std::size_t n : elements) {
        outputs.indices.push_back(all.indices[n - first]);
        outputs.means.push_back(all.means[n - first]);
      }
      const std::vector<std::int32_t> coded = symbols(2 * k + pass, elements, outputs);
      for (std::size_t e = 0; e < elements.size(); ++e) {
        const std::size_t n = elements[e];
        latents.indices[n] = outputs.indices[e];
        latents.symbols[n] = coded[e];
        latents.means[n] = outputs.means[e];
        rounded[n - first] =
            static_cast<std::int64_t>(coded[e]) * (std::int64_t(1) << codec::kMeanFractionBits) + outputs.means[e];
      }
    }
    runner.set_input(static_cast<std::int32_t>(k), rounded);
    first += rounded.size();
  }
}

void calibrate_grouped_checkerboard(const codec::FloatNetwork& network, codec::FloatEvaluation& evaluation,
                                    std::int64_t hyper_height, std::int64_t hyper_width,
                                    const std::vector<float>& latent, std::mt19937_64& random) {
  const codec::Side side = codec::network_sides(
      network, hyper_height, hyper_width)[static_cast<std::size_t>(codec::input_tensors(network)[0])];
  const std::size_t width = static_cast<std::size_t>(side.second);
  const std::size_t plane = static_cast<std::size_t>(side.first) * width;
  std::normal_distribution<double> normal;
  std::size_t first = 0;
  for (std::size_t k = 0; k < evaluation.groups().size(); ++k) {
    const auto group = static_cast<std::int32_t>(k);
    std::vector<double> rounded(static_cast<std::size_t>(evaluation.groups()[k]) * plane, 0.0);
    for (int pass = 0; pass < 2; ++pass) {
      evaluation.set_input(group, rounded);
      const codec::FloatOutputs outputs = evaluation.outputs(group);
      for (std::size_t n = 0; n < rounded.size(); ++n) {
        if (is_checkerboard_anchor(n, plane, width) != (pass == 0)) continue;
        const double mean = outputs.means[n];
        rounded[n] = mean + (latent.empty() ? std::round(std::max(outputs.scales[n], 0.11) * normal(random))
                                            : std::round(latent[first + n] - mean));
      }
    }
    evaluation.set_input(group, rounded);
    first += rounded.size();
  }
  evaluation.values(network.decoded, 0, network.channels()[static_cast<std::size_t>(network.decoded)]);
}

}  // namespace plexus::codec

#include "rate_levels.h"

#include <random>

#include "plexus/codec/autoencoder_contract.h"
#include "plexus/data/patch_sampler.h"

namespace plexus::ae {

namespace {
constexpr std::uint64_t kRateLevelStream = 3;  // the patches' rate levels, from the step's noise seed
}  // namespace

train::TrainingStep::BeforeStep draw_rate_levels(const std::vector<double>& lambdas) {
  std::vector<double> mse_weights;  // per level, lambdas[k] / mean(lambdas)
  const double mean = variable_rate_lambda(lambdas);
  for (double lambda : lambdas) mse_weights.push_back(lambda / mean);
  return [mse_weights](Context& ctx, Net& net, std::int64_t, std::uint64_t noise_seed) {
    std::mt19937_64 generator(data::mix_seed(noise_seed, 0, kRateLevelStream));
    const auto patches = static_cast<std::size_t>(net.input(kImage).dim(0));
    std::vector<double> levels(patches), weights(patches);
    for (std::size_t n = 0; n < patches; ++n) {
      const std::size_t k = static_cast<std::size_t>(generator() % mse_weights.size());
      levels[n] = static_cast<double>(k);
      weights[n] = mse_weights[k];
    }
    set_rate_inputs(ctx, net, levels, weights);
  };
}

}  // namespace plexus::ae

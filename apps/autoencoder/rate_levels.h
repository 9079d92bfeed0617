#pragma once
// A variable-rate model's training step (plexus/codec/autoencoder_contract.h):
// each step draws every patch's rate level k uniformly from the stream
// mix_seed(noise seed, 0, 3) and weights its MSE lambdas[k] / mean(lambdas)
// (the loss weight of "mse" being mean(lambdas) * 255^2).
#include <vector>

#include "plexus/train/training_step.h"

namespace plexus::ae {

// The hook that sets the step's levels and MSE weights (TrainingStep::set_before_step).
train::TrainingStep::BeforeStep draw_rate_levels(const std::vector<double>& lambdas);

}  // namespace plexus::ae

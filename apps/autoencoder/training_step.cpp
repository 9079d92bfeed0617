#include "training_step.h"

#include <string>

#include <spdlog/spdlog.h>

#include "autoencoder_contract.h"
#include "plexus/data/patch_sampler.h"

namespace plexus::ae {

namespace {

constexpr std::uint64_t kNoiseStream = 1;

// Whether the step can be recorded into a CUDA graph; logs once why not.
bool graph_usable(bool requested, const Context& ctx, const Net& net, const Optimizer& optimizer) {
  if (!requested || !ctx.device().is_cuda()) return false;
  std::string culprit;
  if (!net.cuda_graph_capturable(&culprit)) {
    spdlog::info("CUDA graph off: {} does not declare itself capturable; launching each step eagerly", culprit);
    return false;
  }
  if (!optimizer.cuda_graph_capturable()) {
    spdlog::info("CUDA graph off: the {} optimiser is not capturable; launching each step eagerly", optimizer.name());
    return false;
  }
  return true;
}

Divergence divergence_of(const StepMetrics::Window& w) {
  return {w.first_bad_step, w.bad_loss, w.bad_terms[0], w.bad_terms[1]};
}

}  // namespace

TrainingStep::TrainingStep(Net& net, Optimizer& optimizer, Context& ctx, data::BatchLoader& loader,
                           std::uint64_t seed, double distortion_weight, bool cuda_graph, std::int64_t steps_before)
    : net_(net),
      optimizer_(optimizer),
      ctx_(ctx),
      parameters_(net.trainable_parameters()),
      seed_(seed),
      distortion_weight_(distortion_weight),
      input_(loader, ctx.device(), net.input(kImage).shape()),
      metrics_(ctx.device(), {distortion_weight, 1.0}, steps_before),
      graph_(graph_usable(cuda_graph, ctx, net, optimizer)) {}

void TrainingStep::run(std::int64_t step) {
  input_.next_into(ctx_, net_.input(kImage));
  ctx_.reseed(data::mix_seed(seed_, static_cast<std::uint64_t>(step), kNoiseStream));
  optimizer_.begin_step(ctx_, parameters_);
  graph_.run(ctx_, net_.layout_version(), [&] {
    net_.zero_grad();
    net_.forward(ctx_);
    metrics_.record(ctx_, {&net_.blob(kDistortion), &net_.blob(kRate)});
    net_.backward(ctx_, {{kDistortion, distortion_weight_}, {kRate, 1.0}});
    if (clipper_) clipper_->clip(ctx_, parameters_);
    optimizer_.apply(ctx_, parameters_);
  });
  net_.after_update(ctx_, step + 1);  // outside the graph: layers may decide on the host
}

TrainingWindow TrainingStep::read_window() { return window_of(metrics_.read(ctx_)); }

TrainingWindow TrainingStep::peek_window() { return window_of(metrics_.peek(ctx_)); }

TrainingWindow TrainingStep::window_of(const StepMetrics::Window& w) {
  TrainingWindow result;
  result.steps = w.steps;
  if (w.steps > 0) {
    result.loss = w.loss_sum / w.steps;
    result.mse = w.term_sums[0] / w.steps;
    result.bpp = w.term_sums[1] / w.steps;
  }
  result.last_loss = w.last_loss;
  result.last_mse = w.last_terms[0];
  result.last_bpp = w.last_terms[1];
  if (w.first_bad_step > 0) result.divergence = divergence_of(w);
  return result;
}

std::optional<Divergence> TrainingStep::divergence() { return peek_window().divergence; }

}  // namespace plexus::ae

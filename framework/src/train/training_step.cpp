#include "plexus/train/training_step.h"

#include <string>

#include <spdlog/spdlog.h>

#include "plexus/data/patch_sampler.h"

namespace plexus::train {

namespace {

constexpr std::uint64_t kNoiseStream = 1;
constexpr std::uint64_t kRankNoiseStream = 2;  // mixed with the step's noise seed for ranks > 0

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
  spdlog::info("CUDA graph on: the training step is recorded once and replayed");
  return true;
}

Divergence divergence_of(const StepMetrics::Window& w) { return {w.first_bad_step, w.bad_loss, w.bad_terms}; }

std::vector<double> weights_of(const StepLoss& loss) {
  std::vector<double> weights;
  for (const LossTerm& term : loss.terms) weights.push_back(term.weight);
  return weights;
}

std::vector<std::string> blobs_of(const StepLoss& loss) {
  std::vector<std::string> blobs;
  for (const LossTerm& term : loss.terms) blobs.push_back(term.blob);
  return blobs;
}

std::map<std::string, double> loss_weights_of(const StepLoss& loss) {
  std::map<std::string, double> weights;
  // A term of weight 0 is recorded, never backpropagated: it adds nothing to the gradient.
  for (const LossTerm& term : loss.terms)
    if (term.weight != 0) weights[term.blob] += term.weight;
  return weights;
}

}  // namespace

TrainingStep::TrainingStep(Net& net, Optimizer& optimizer, Context& ctx, data::BatchLoader& loader,
                           const StepLoss& loss, std::uint64_t seed, bool cuda_graph, std::int64_t steps_before,
                           distributed::Communicator* communicator, std::size_t gradient_bucket_bytes)
    : net_(net),
      optimizer_(optimizer),
      ctx_(ctx),
      parameters_(net.trainable_parameters()),
      seed_(seed),
      input_name_(loss.input),
      terms_(blobs_of(loss)),
      loss_weights_(loss_weights_of(loss)),
      input_(loader, ctx.device(), net.input(loss.input).shape()),
      metrics_(ctx.device(), weights_of(loss), steps_before),
      graph_(graph_usable(cuda_graph, ctx, net, optimizer)),
      communicator_(communicator) {
  if (communicator_) {
    buckets_ = std::make_unique<distributed::GradientBuckets>(net_, *communicator_, gradient_bucket_bytes);
    spdlog::info("gradient all-reduce: {} bucket(s) of up to {:.3g} MiB", buckets_->buckets().size(),
                 static_cast<double>(gradient_bucket_bytes) / (1 << 20));
  }
}

std::uint64_t TrainingStep::noise_seed(std::int64_t step) const {
  const std::uint64_t seed = data::mix_seed(seed_, static_cast<std::uint64_t>(step), kNoiseStream);
  if (!communicator_ || communicator_->rank() == 0) return seed;
  return data::mix_seed(seed, static_cast<std::uint64_t>(communicator_->rank()), kRankNoiseStream);
}

void TrainingStep::wait_for_reductions() {
  if (communicator_) communicator_->synchronize();
}

void TrainingStep::run(std::int64_t step) {
  input_.next_into(ctx_, net_.input(input_name_));
  if (before_step_) before_step_(ctx_, net_, step, noise_seed(step));  // enqueued before the step, outside its graph
  ctx_.reseed(noise_seed(step));
  optimizer_.begin_step(ctx_, parameters_);
  graph_.run(ctx_, net_.layout_version(), [&] {
    net_.zero_grad();
    net_.forward(ctx_);
    std::vector<const Tensor*> terms;
    for (const std::string& blob : terms_) terms.push_back(&net_.blob(blob));
    metrics_.record(ctx_, terms);
    // Eager steps: the previous step's reductions, waited for (with the
    // timeout) while this step's forward is already queued, so the GPU does
    // not idle. A graph's steps are paced by mark_step below instead.
    if (!graph_.enabled()) wait_for_reductions();
    net_.backward(ctx_, loss_weights_);
    // The mean gradient of all ranks, before clipping. In a graph the
    // all-reduces are recorded with the step, still overlapped with backward.
    if (buckets_) buckets_->finish(ctx_);
    if (clipper_) clipper_->clip(ctx_, parameters_);
    optimizer_.apply(ctx_, parameters_);
  });
  if (communicator_ && graph_.enabled()) communicator_->mark_step(ctx_);
  net_.after_update(ctx_, step + 1);  // outside the graph: layers may decide on the host
}

TrainingWindow TrainingStep::read_window() {
  wait_for_reductions();
  TrainingWindow window = window_of(metrics_.read(ctx_));
  if (communicator_ && communicator_->world_size() > 1) average_over_ranks(window);
  return window;
}

// Every rank reads its window after the same steps, of the same batch size:
// the mean of the ranks' means is the mean over the global batch, what one
// process with the whole batch logs (to f32's precision, the all-reduce's).
void TrainingStep::average_over_ranks(TrainingWindow& window) {
  const std::size_t terms = window.terms.size();
  std::vector<double> values{window.loss, window.last_loss};
  values.insert(values.end(), window.terms.begin(), window.terms.end());
  values.insert(values.end(), window.last_terms.begin(), window.last_terms.end());
  Tensor means = Tensor::from_values(values, {static_cast<std::int64_t>(values.size())}, DType::f32, ctx_.device());
  communicator_->all_reduce(ctx_, means, distributed::Reduction::average);
  communicator_->synchronize();
  values = means.to_values();
  window.loss = values[0];
  window.last_loss = values[1];
  for (std::size_t k = 0; k < terms; ++k) window.terms[k] = values[2 + k];
  for (std::size_t k = 0; k < window.last_terms.size(); ++k) window.last_terms[k] = values[2 + terms + k];
}

TrainingWindow TrainingStep::peek_window() {
  wait_for_reductions();
  return window_of(metrics_.peek(ctx_));
}

TrainingWindow TrainingStep::window_of(const StepMetrics::Window& w) {
  TrainingWindow result;
  result.steps = w.steps;
  result.terms.assign(w.term_sums.size(), 0.0);
  if (w.steps > 0) {
    result.loss = w.loss_sum / w.steps;
    for (std::size_t k = 0; k < w.term_sums.size(); ++k) result.terms[k] = w.term_sums[k] / w.steps;
  }
  result.last_loss = w.last_loss;
  result.last_terms = w.last_terms;
  if (w.first_bad_step > 0) result.divergence = divergence_of(w);
  return result;
}

std::optional<Divergence> TrainingStep::divergence() { return peek_window().divergence; }

}  // namespace plexus::train

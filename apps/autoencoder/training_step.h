#pragma once
// TrainingStep: one optimisation step of `plexus-ae train`, enqueued without
// waiting for the GPU. Step k takes batch k of the loader (through
// DeviceInput: pinned buffers and an overlapped copy), reseeds the noise
// with mix_seed(seed, k, 1), and runs forward, the loss record
// (StepMetrics), backward and the Adam update: replayed from a CUDA graph
// (StepGraph) when enabled and every layer is capturable, else launched
// eagerly. The loss, mse and bpp stay on the device until read_window();
// the first step with a non-finite loss is recorded there too.
//
// Data-parallel (with a communicator): the gradients are averaged over the
// ranks by GradientBuckets, overlapped with backward, before clipping and
// the update; with a CUDA graph the all-reduces are recorded into it with
// the rest of the step. So that a rank that died stops the others within
// the communicator's timeout instead of letting them queue work forever, an
// eager step, once its forward is queued, waits for the previous step's
// reductions; a replayed step is followed by Communicator::mark_step, which
// waits for the step before last. Rank 0 draws the noise of a
// single-process run; rank r > 0 a stream of its own.
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "plexus/context.h"
#include "plexus/data/batch_loader.h"
#include "plexus/data/device_input.h"
#include "plexus/distributed/communicator.h"
#include "plexus/distributed/gradient_buckets.h"
#include "plexus/grad_clip.h"
#include "plexus/net.h"
#include "plexus/optimizer.h"
#include "plexus/step_graph.h"
#include "plexus/step_metrics.h"

namespace plexus::ae {

struct Divergence {
  std::int64_t step = 0;  // 1-based: the step whose loss was not finite
  double loss = 0, mse = 0, bpp = 0;
};

struct TrainingWindow {
  std::int64_t steps = 0;
  double loss = 0, mse = 0, bpp = 0;                 // means over the window
  double last_loss = 0, last_mse = 0, last_bpp = 0;  // the window's last step
  std::optional<Divergence> divergence;
};

class TrainingStep {
 public:
  // `steps_before`: steps already taken (a resumed run's step). With
  // `cuda_graph` on a CUDA context, says in the log once when the graph
  // cannot be used and why.
  // `communicator`: null for one process; else this rank's, which must
  // outlive the TrainingStep, with gradient buckets of `gradient_bucket_bytes`.
  TrainingStep(Net& net, Optimizer& optimizer, Context& ctx, data::BatchLoader& loader, std::uint64_t seed,
               double distortion_weight, bool cuda_graph, std::int64_t steps_before,
               distributed::Communicator* communicator = nullptr,
               std::size_t gradient_bucket_bytes = distributed::GradientBuckets::kDefaultBucketBytes);

  // Enqueues step `step` (0-based).
  void run(std::int64_t step);
  // Means since the last read, and the divergence record; synchronises.
  TrainingWindow read_window();
  // The same without starting a new window (the CPU's per-step progress line).
  TrainingWindow peek_window();
  // The first step with a non-finite loss, if any; synchronises on CUDA.
  std::optional<Divergence> divergence();
  // True on the CPU, where reading the record costs nothing: the loop then
  // checks it (and updates its progress line) every step.
  bool checks_every_step() const { return ctx_.device().is_cpu(); }
  bool uses_cuda_graph() const { return graph_.enabled(); }
  // Seconds run() has waited for the loader's batches so far.
  double seconds_waiting_for_loader() const { return input_.seconds_waiting_for_loader(); }
  // Clips the gradient norm between backward and the update (null: none).
  // On CUDA it runs on the device and is recorded into the graph with the step.
  void set_gradient_clipper(GradientClipper* clipper) { clipper_ = clipper; }
  // A variable-rate model: each step draws every patch's rate level k
  // uniformly from the stream mix_seed(noise seed, 0, 3) and weights its MSE
  // lambdas[k] / mean(lambdas) (the loss weight of "mse" being
  // mean(lambdas) * 255^2). Empty: a model of one rate.
  void set_rate_lambdas(const std::vector<double>& lambdas);

 private:
  static TrainingWindow window_of(const StepMetrics::Window& w);
  std::uint64_t noise_seed(std::int64_t step) const;
  void wait_for_reductions();
  void draw_rate_levels(std::int64_t step);
  Net& net_;
  Optimizer& optimizer_;
  Context& ctx_;
  std::vector<NamedParameter> parameters_;
  std::uint64_t seed_;
  double distortion_weight_;
  data::DeviceInput input_;
  StepMetrics metrics_;
  StepGraph graph_;
  GradientClipper* clipper_ = nullptr;
  distributed::Communicator* communicator_ = nullptr;
  std::unique_ptr<distributed::GradientBuckets> buckets_;
  std::vector<double> mse_weights_;  // per level, lambdas[k] / mean(lambdas); empty: one rate
};

}  // namespace plexus::ae

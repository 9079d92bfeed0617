#pragma once
// TrainingStep: one optimisation step of the trainer, enqueued without
// waiting for the GPU. Step k takes batch k of the loader into the net's
// input blob (through DeviceInput: pinned buffers and an overlapped copy),
// runs the command's hook (set_before_step), reseeds the noise with
// mix_seed(seed, k, 1), and runs forward, the loss record (StepMetrics),
// backward and the optimiser's update: replayed from a CUDA graph
// (StepGraph) when enabled and every layer is capturable, else launched
// eagerly. The loss is the weighted sum of scalar blobs (the loss terms);
// it and the terms stay on the device until read_window(); the first step
// with a non-finite loss is recorded there too.
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
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
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

namespace plexus::train {

// A term of the loss: a scalar blob of the net and its weight.
struct LossTerm {
  std::string blob;
  double weight = 1;
};

// What a step trains: the blob each batch is copied into, and the loss.
struct StepLoss {
  std::string input;  // e.g. "image"
  // loss = sum_k weight_k * blob_k (1 to StepMetrics::kMaxTerms terms); a
  // term of weight 0 is recorded for the log and not backpropagated.
  std::vector<LossTerm> terms;
};

struct Divergence {
  std::int64_t step = 0;  // 1-based: the step whose loss was not finite
  double loss = 0;
  std::vector<double> terms;  // the loss terms' values then, in StepLoss::terms's order
};

struct TrainingWindow {
  std::int64_t steps = 0;
  double loss = 0;            // mean over the window
  std::vector<double> terms;  // means over the window, in StepLoss::terms's order
  double last_loss = 0;       // the window's last step
  std::vector<double> last_terms;
  std::optional<Divergence> divergence;
};

class TrainingStep {
 public:
  // `steps_before`: steps already taken (a resumed run's step). With
  // `cuda_graph` on a CUDA context, says in the log once when the graph
  // cannot be used and why.
  // `communicator`: null for one process; else this rank's, which must
  // outlive the TrainingStep, with gradient buckets of `gradient_bucket_bytes`.
  TrainingStep(Net& net, Optimizer& optimizer, Context& ctx, data::BatchLoader& loader, const StepLoss& loss,
               std::uint64_t seed, bool cuda_graph, std::int64_t steps_before,
               distributed::Communicator* communicator = nullptr,
               std::size_t gradient_bucket_bytes = distributed::GradientBuckets::kDefaultBucketBytes);

  // Enqueues step `step` (0-based).
  void run(std::int64_t step);
  // Means since the last read, and the divergence record; synchronises. In
  // data-parallel training the means are averaged over the ranks (a
  // collective: every rank reads after the same steps); the divergence
  // record stays this rank's.
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
  // Run by run(step) after the batch is in the input blob and before the
  // noise is reseeded, outside the CUDA graph: it may set other inputs of
  // the net for the step (a variable-rate model's levels), drawing them
  // from `noise_seed`, the step's noise seed.
  using BeforeStep = std::function<void(Context& ctx, Net& net, std::int64_t step, std::uint64_t noise_seed)>;
  void set_before_step(BeforeStep hook) { before_step_ = std::move(hook); }

 private:
  static TrainingWindow window_of(const StepMetrics::Window& w);
  void average_over_ranks(TrainingWindow& window);
  std::uint64_t noise_seed(std::int64_t step) const;
  void wait_for_reductions();
  Net& net_;
  Optimizer& optimizer_;
  Context& ctx_;
  std::vector<NamedParameter> parameters_;
  std::uint64_t seed_;
  std::string input_name_;
  std::vector<std::string> terms_;              // the loss terms' blobs
  std::map<std::string, double> loss_weights_;  // what backward() starts from
  data::DeviceInput input_;
  StepMetrics metrics_;
  StepGraph graph_;
  GradientClipper* clipper_ = nullptr;
  distributed::Communicator* communicator_ = nullptr;
  std::unique_ptr<distributed::GradientBuckets> buckets_;
  BeforeStep before_step_;
};

}  // namespace plexus::train

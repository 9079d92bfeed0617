#pragma once
// StepGraph: one training step's device work recorded once into a CUDA
// graph and replayed, so a step costs one launch instead of hundreds.
//
//   StepGraph graph(/*enabled=*/true);
//   for (...) {
//     input.next_into(ctx, net.input("image"));       // outside: per-step host work
//     ctx.reseed(seed_of(step));                      // writes the seed in device memory
//     optimizer.begin_step(ctx, parameters);          // writes lr, corrections in device memory
//     graph.run(ctx, net.layout_version(), [&] {      // the same device work every step
//       net.zero_grad(); net.forward(ctx); net.backward(ctx, ...); optimizer.apply(ctx, parameters);
//     });
//   }
//
// The first run at a layout calls `step` eagerly (lazily allocated scratch
// buffers settle at their final addresses); the second records it on the
// context's stream and launches the graph; later runs only launch it. A new
// layout (Net::layout_version) drops the graph and starts over, and so does
// memory shared between layers that was replaced since the recording
// (Context::memory_generation: scratch another net or shape outgrew). Whatever
// changes between steps must therefore live in device memory written
// outside `step`: the input batch, the random seed, the hyperparameters.
// Tensors allocated and freed inside `step` become graph memory nodes.
// Disabled, or on a CPU context, run() just calls `step`.
#include <cstdint>
#include <functional>
#include <memory>

#include "plexus/context.h"

namespace plexus {

class StepGraph {
 public:
  explicit StepGraph(bool enabled);
  ~StepGraph();
  StepGraph(const StepGraph&) = delete;
  StepGraph& operator=(const StepGraph&) = delete;

  // Throws DeviceError (saying so) when recording the step fails, e.g.
  // because a layer claimed to be capturable but synchronised.
  void run(Context& ctx, std::uint64_t layout, const std::function<void()>& step);
  bool enabled() const { return enabled_; }
  // How many graphs were recorded so far.
  int recordings() const { return recordings_; }
  // Whether the last run() launched a recorded graph.
  bool replayed_last() const { return replayed_last_; }

 private:
  struct Recorded;
  bool enabled_;
  int recordings_ = 0;
  bool replayed_last_ = false;
  bool have_layout_ = false;
  std::uint64_t layout_ = 0;
  std::uint64_t memory_generation_ = 0;  // the context's at the last warm-up
  std::unique_ptr<Recorded> recorded_;
};

}  // namespace plexus

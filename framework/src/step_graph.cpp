#include "plexus/step_graph.h"

#include <string>

#include "backend.h"
#include "plexus/error.h"

#if PLEXUS_WITH_CUDA
#include "plexus/cuda/cuda_check.h"
#include "plexus/cuda/cuda_context.h"
#endif

namespace plexus {

#if PLEXUS_WITH_CUDA

struct StepGraph::Recorded {
  cudaStream_t stream = nullptr;
  cudaGraphExec_t executable = nullptr;
  ~Recorded() {
    if (!executable) return;
    cudaStreamSynchronize(stream);  // a queued replay still owns the graph's memory
    cudaGraphExecDestroy(executable);
  }
};

namespace {

// Records `step` on `stream`. Capture mode "thread local": other threads
// (the data loader's) may keep using CUDA meanwhile.
cudaGraph_t record(cudaStream_t stream, const std::function<void()>& step) {
  cuda::check_cuda(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture", __FILE__,
                   __LINE__);
  device_memory::set_capture_stream(stream);
  try {
    step();
  } catch (...) {
    device_memory::set_capture_stream(nullptr);
    cudaGraph_t broken = nullptr;
    cudaStreamEndCapture(stream, &broken);
    if (broken) cudaGraphDestroy(broken);
    cudaGetLastError();  // clear the capture's error so later calls start clean
    throw;
  }
  device_memory::set_capture_stream(nullptr);
  cudaGraph_t graph = nullptr;
  cuda::check_cuda(cudaStreamEndCapture(stream, &graph), "cudaStreamEndCapture", __FILE__, __LINE__);
  return graph;
}

}  // namespace

void StepGraph::run(Context& ctx, std::uint64_t layout, const std::function<void()>& step) {
  replayed_last_ = false;
  if (!enabled_ || !ctx.device().is_cuda()) {
    step();
    return;
  }
  if (!have_layout_ || layout != layout_ || ctx.memory_generation() != memory_generation_) {
    recorded_.reset();
    have_layout_ = true;
    layout_ = layout;
    step();  // the warm-up run at this layout, after which shared scratch has its size
    memory_generation_ = ctx.memory_generation();
    return;
  }
  const cudaStream_t stream = cuda::stream(ctx);
  if (!recorded_) {
    auto recorded = std::make_unique<Recorded>();
    recorded->stream = stream;
    cudaGraph_t graph = nullptr;
    try {
      graph = record(stream, step);
      if (ctx.memory_generation() != memory_generation_)
        throw DeviceError("shared scratch memory grew while the step was recorded, so the graph would hold memory "
                          "that is replaced later");
      cuda::check_cuda(cudaGraphInstantiate(&recorded->executable, graph, 0), "cudaGraphInstantiate", __FILE__,
                       __LINE__);
    } catch (const Error& e) {
      if (graph) cudaGraphDestroy(graph);
      throw DeviceError(std::string("recording the training step into a CUDA graph failed (launch it eagerly "
                                    "instead, e.g. plexus-ae train --cuda-graph off): ") +
                        e.what());
    }
    cudaGraphDestroy(graph);
    recorded_ = std::move(recorded);
    ++recordings_;
  }
  if (recorded_->stream != stream)
    throw DeviceError("StepGraph::run: the graph was recorded on another context's stream");
  cuda::check_cuda(cudaGraphLaunch(recorded_->executable, stream), "cudaGraphLaunch", __FILE__, __LINE__);
  replayed_last_ = true;
}

#else

struct StepGraph::Recorded {};

void StepGraph::run(Context&, std::uint64_t, const std::function<void()>& step) {
  replayed_last_ = false;
  step();
}

#endif

StepGraph::StepGraph(bool enabled) : enabled_(enabled) {}
StepGraph::~StepGraph() = default;

}  // namespace plexus

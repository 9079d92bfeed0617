#pragma once
// Work that may run beside the work that follows it on a context's stream:
// e.g. a convolution's weight gradient, which nothing in the backward pass
// reads, beside its input gradient, which the next layer waits for. Each
// pass of a small layer leaves most of the GPU idle; the two together fill
// more of it.
//
//   cuda::Branch branch(ctx);   // forks: the branch sees all work enqueued on ctx so far
//   branch.run([&] { ... });    // enqueued on the branch stream
//   ...                         // enqueued on the context's stream, beside the branch
//   branch.join();              // the context's stream waits for the branch
//
// Inside run(), cuda::stream(ctx) is the branch stream, so kernels launched
// through it land there; cuBLAS and cuRAND stay bound to the context's own
// stream and throw if called inside run(). While a CUDA graph is captured
// on the context's stream the branch becomes a parallel path of the graph.
// The destructor joins a branch not yet joined (when an exception unwinds).
// Inside a Context::DeferredJoins, join() leaves the branch running beside
// the passes that follow until Context::join_branches() (plexus/context.h).
// One branch per context at a time (branches of successive passes queue on
// the one branch stream); the stream is made on first use and kept by the
// context.
#include <functional>

#include "plexus/context.h"

namespace plexus::cuda {

class Branch {
 public:
  explicit Branch(const Context& ctx);
  ~Branch();
  Branch(const Branch&) = delete;
  Branch& operator=(const Branch&) = delete;

  // Runs `enqueue` with the branch stream as the context's stream.
  void run(const std::function<void()>& enqueue);
  // Makes the context's stream wait for everything run() enqueued.
  void join();

 private:
  const Context& ctx_;
  bool joined_ = false;
};

}  // namespace plexus::cuda

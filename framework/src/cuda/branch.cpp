#include "plexus/cuda/branch.h"

#include "plexus/cuda/cuda_check.h"
#include "plexus/cuda/cuda_context.h"
#include "../backend.h"

namespace plexus::cuda {

namespace {

// The context's branch stream and events, made on first use. The stream is
// blocking, like the context's own: device memory is allocated and freed on
// the legacy stream, with which both synchronise.
void make_branch(CudaResources& r) {
  if (r.branch_stream) return;
  check_cuda(cudaSetDevice(r.device), "cudaSetDevice", __FILE__, __LINE__);
  check_cuda(cudaEventCreateWithFlags(&r.branch_fork, cudaEventDisableTiming), "cudaEventCreateWithFlags", __FILE__,
             __LINE__);
  check_cuda(cudaEventCreateWithFlags(&r.branch_join, cudaEventDisableTiming), "cudaEventCreateWithFlags", __FILE__,
             __LINE__);
  check_cuda(cudaStreamCreate(&r.branch_stream), "cudaStreamCreate", __FILE__, __LINE__);
}

}  // namespace

Branch::Branch(const Context& ctx) : ctx_(ctx) {
  CudaResources& r = resources(ctx);
  if (in_branch(r)) throw DeviceError("cuda::Branch: a branch of this context is already open");
  make_branch(r);
  check_cuda(cudaEventRecord(r.branch_fork, r.stream), "cudaEventRecord", __FILE__, __LINE__);
  check_cuda(cudaStreamWaitEvent(r.branch_stream, r.branch_fork, 0), "cudaStreamWaitEvent", __FILE__, __LINE__);
}

Branch::~Branch() {
  // Unwinding: the context's stream must still wait for the branch (and a
  // capture needs the branch joined before it ends). Errors cannot be thrown
  // from here; the next checked call on the stream reports them.
  try {
    join();
  } catch (...) {
  }
}

void Branch::run(const std::function<void()>& enqueue) {
  if (joined_) throw DeviceError("cuda::Branch::run after join()");
  CudaResources& r = resources(ctx_);
  // The context's own stream again when run() returns or throws.
  struct Restore {
    CudaResources& resources;
    cudaStream_t own;
    ~Restore() { resources.stream = own; }
  } restore{r, r.stream};
  r.stream = r.branch_stream;
  enqueue();
}

void Branch::join() {
  if (joined_) return;
  joined_ = true;
  CudaResources& r = resources(ctx_);
  r.branch_pending = true;
  if (!r.defer_joins) join_branches(r);
}

}  // namespace plexus::cuda

// cuda::Branch: the branch runs after everything enqueued on the context's
// stream before it, the context's stream waits at join() for everything the
// branch ran, also when an exception skips join(), and a CUDA graph captured
// across a branch holds both paths. Inside a Context::DeferredJoins, join()
// leaves the branch running until join_branches() or the scope's end. Each ordering test holds one side back
// with a sleeping host function, so a missing wait reads the old value
// instead of the new one. CUDA only; skips without a GPU.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <string>
#include <stdexcept>
#include <thread>
#include <vector>

#include "plexus/context.h"
#include "plexus/testing/gtest_helpers.h"
#if PLEXUS_WITH_CUDA
#include "plexus/cuda/branch.h"
#include "plexus/cuda/cuda_check.h"
#include "plexus/cuda/cuda_context.h"
#endif

namespace plexus {
namespace {

#if PLEXUS_WITH_CUDA
constexpr std::int64_t kCount = 1 << 20;
constexpr int kOld = 0x11, kNew = 0x5a;  // byte patterns of the buffers

void check(cudaError_t status, const char* call) { cuda::check_cuda(status, call, __FILE__, __LINE__); }

// Enqueues a 500 ms pause of `stream` (a host function that sleeps).
void hold_back(cudaStream_t stream) {
  check(cudaLaunchHostFunc(
            stream, [](void*) { std::this_thread::sleep_for(std::chrono::milliseconds(500)); }, nullptr),
        "cudaLaunchHostFunc");
}

struct DeviceBytes {
  explicit DeviceBytes(int pattern) {
    check(cudaMalloc(&data, kCount), "cudaMalloc");
    check(cudaMemset(data, pattern, kCount), "cudaMemset");
  }
  ~DeviceBytes() { cudaFree(data); }
  // Whether every byte is `pattern` (after the device is idle).
  bool all(int pattern) const {
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    std::vector<unsigned char> host(kCount);
    check(cudaMemcpy(host.data(), data, kCount, cudaMemcpyDeviceToHost), "cudaMemcpy");
    for (unsigned char byte : host)
      if (byte != pattern) return false;
    return true;
  }
  void* data = nullptr;
};

// On the context's stream of the moment (the branch's inside run()): a
// 500 ms pause, then every byte of `bytes` set to kNew.
void write_late(const Context& ctx, DeviceBytes& bytes) {
  hold_back(cuda::stream(ctx));
  check(cudaMemsetAsync(bytes.data, kNew, kCount, cuda::stream(ctx)), "cudaMemsetAsync");
}

// On the context's stream of the moment: destination = source.
void copy_on_stream(const Context& ctx, DeviceBytes& destination, const DeviceBytes& source) {
  check(cudaMemcpyAsync(destination.data, source.data, kCount, cudaMemcpyDeviceToDevice, cuda::stream(ctx)),
        "cudaMemcpyAsync");
}

TEST(CudaBranch, TheBranchRunsAfterTheWorkEnqueuedBeforeIt) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  Context ctx(Device::cuda());
  DeviceBytes source(kOld), copy(kOld);
  write_late(ctx, source);
  cuda::Branch branch(ctx);
  branch.run([&] { copy_on_stream(ctx, copy, source); });
  branch.join();
  ctx.synchronize();
  EXPECT_TRUE(copy.all(kNew)) << "the branch copied the source before the context's stream wrote it";
}

TEST(CudaBranch, WorkAfterJoinWaitsForTheBranch) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  Context ctx(Device::cuda());
  DeviceBytes written(kOld), copy(kOld);
  cuda::Branch branch(ctx);
  branch.run([&] { write_late(ctx, written); });
  branch.join();
  copy_on_stream(ctx, copy, written);
  ctx.synchronize();
  EXPECT_TRUE(copy.all(kNew)) << "the context's stream read the buffer before the branch wrote it";
}

TEST(CudaBranch, DeferredJoinsWaitForJoinBranches) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  Context ctx(Device::cuda());
  DeviceBytes written(kOld), before_join(kOld), after_join(kOld);
  {
    Context::DeferredJoins deferred(ctx);
    cuda::Branch branch(ctx);
    branch.run([&] { write_late(ctx, written); });
    branch.join();  // deferred: the copy below does not wait for the held-back branch
    copy_on_stream(ctx, before_join, written);
    // The context's own stream alone (ctx.synchronize() would join the branch first).
    check(cudaStreamSynchronize(cuda::stream(ctx)), "cudaStreamSynchronize");
    ctx.join_branches();
    copy_on_stream(ctx, after_join, written);
  }
  ctx.synchronize();
  EXPECT_TRUE(before_join.all(kOld)) << "the context's stream waited for a deferred join";
  EXPECT_TRUE(after_join.all(kNew)) << "join_branches() did not make the context's stream wait";
}

TEST(CudaBranch, TheEndOfDeferredJoinsJoins) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  Context ctx(Device::cuda());
  DeviceBytes written(kOld), copy(kOld);
  {
    Context::DeferredJoins deferred(ctx);
    cuda::Branch branch(ctx);
    branch.run([&] { write_late(ctx, written); });
    branch.join();
  }
  copy_on_stream(ctx, copy, written);
  ctx.synchronize();
  EXPECT_TRUE(copy.all(kNew)) << "the branch was not joined when DeferredJoins ended";
}

TEST(CudaBranch, AnExceptionLeavesTheBranchJoinedAndTheStreamRestored) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  Context ctx(Device::cuda());
  const cudaStream_t own = cuda::stream(ctx);
  DeviceBytes written(kOld), copy(kOld);
  try {
    cuda::Branch branch(ctx);
    branch.run([&] {
      write_late(ctx, written);
      throw std::runtime_error("a failing pass");
    });
    FAIL() << "run() did not pass the exception on";
  } catch (const std::runtime_error&) {
  }
  EXPECT_EQ(cuda::stream(ctx), own);
  copy_on_stream(ctx, copy, written);
  ctx.synchronize();
  EXPECT_TRUE(copy.all(kNew)) << "the branch was not joined when the exception left its scope";
}

// The DeviceError `call` throws names `expected`.
void expect_refused(const std::function<void()>& call, const std::string& expected) {
  const std::string message = testing::error_of<DeviceError>(call);
  EXPECT_NE(message.find(expected), std::string::npos) << message;
}

TEST(CudaBranch, InsideRunKernelsGoToTheBranchAndTheLibraryHandlesRefuseNamingWhy) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  Context ctx(Device::cuda());
  const cudaStream_t own = cuda::stream(ctx);
  cuda::Branch branch(ctx);
  branch.run([&] {
    EXPECT_NE(cuda::stream(ctx), own);
    expect_refused([&] { cuda::cublas(ctx); }, "cuBLAS was called inside cuda::Branch::run");
    expect_refused([&] { cuda::curand(ctx); }, "cuRAND was called inside cuda::Branch::run");
    expect_refused([&] { cuda::Branch{ctx}; }, "a branch of this context is already open");  // one at a time
  });
  EXPECT_EQ(cuda::stream(ctx), own);
  EXPECT_NE(cuda::cublas(ctx), nullptr);
  branch.join();
  expect_refused([&] { branch.run([] {}); }, "cuda::Branch::run after join()");
}

TEST(CudaBranch, ACapturedGraphHoldsBothPaths) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  Context ctx(Device::cuda());
  DeviceBytes source(kOld), copy(kOld), beside(kOld);
  const cudaStream_t own = cuda::stream(ctx);
  check(cudaStreamBeginCapture(own, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
  check(cudaMemsetAsync(source.data, kNew, kCount, own), "cudaMemsetAsync");
  cuda::Branch branch(ctx);
  branch.run([&] { copy_on_stream(ctx, copy, source); });
  check(cudaMemsetAsync(beside.data, kNew, kCount, own), "cudaMemsetAsync");
  branch.join();
  cudaGraph_t graph = nullptr;
  check(cudaStreamEndCapture(own, &graph), "cudaStreamEndCapture (fails when the branch is not joined)");
  std::size_t nodes = 0;
  check(cudaGraphGetNodes(graph, nullptr, &nodes), "cudaGraphGetNodes");
  EXPECT_GE(nodes, 3u);
  cudaGraphExec_t exec = nullptr;
  check(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
  EXPECT_TRUE(copy.all(kOld)) << "capturing ran the work";
  check(cudaGraphLaunch(exec, own), "cudaGraphLaunch");
  ctx.synchronize();
  EXPECT_TRUE(copy.all(kNew));
  EXPECT_TRUE(beside.all(kNew));
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}
#else
TEST(CudaBranch, NeedsACudaBuild) { GTEST_SKIP() << "built without CUDA"; }
#endif

}  // namespace
}  // namespace plexus

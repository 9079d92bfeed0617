#pragma once
// DeviceInput: BatchLoader batches delivered into a tensor on the device
// the training step runs on, without stalling it.
//
// On CUDA, `depth` batches are in flight: each is copied by the calling
// thread into its own pinned (page-locked) host buffer and sent to a device
// buffer on a separate copy stream, so the copy of batch k+1 overlaps the
// compute of step k. next_into() makes the step's stream wait (on the
// device, through an event) for its batch and copies it into the step's
// input; the host never waits for the GPU except to stay at most one step
// ahead of it, which keeps host-side step timing meaningful. On the CPU,
// next_into() is loader.next() copied into the destination.
//
// The batches and their order are exactly the loader's.
#include <memory>

#include "plexus/context.h"
#include "plexus/data/batch_loader.h"
#include "plexus/tensor.h"

namespace plexus::data {

class DeviceInput {
 public:
  // Batches of `shape` (f32) for `device`. Throws ConfigError for depth < 2.
  DeviceInput(BatchLoader& loader, Device device, Shape shape, int depth = 2);
  ~DeviceInput();
  DeviceInput(const DeviceInput&) = delete;
  DeviceInput& operator=(const DeviceInput&) = delete;

  // The next batch into `destination` (shape, f32, on the device), ordered
  // before any work enqueued next on ctx's stream. Throws ShapeError when a
  // batch or the destination does not match `shape`, and rethrows the
  // loader's errors.
  void next_into(Context& ctx, Tensor& destination);

 private:
  struct Pipeline;
  BatchLoader& loader_;
  Device device_;
  Shape shape_;
  std::unique_ptr<Pipeline> pipeline_;  // CUDA only
};

}  // namespace plexus::data

#pragma once
// DeviceInput: BatchLoader batches delivered into a tensor on the device
// the training step runs on, without stalling it.
//
// On CUDA the loader builds each batch as 8-bit values straight into a
// page-locked buffer (see BatchLoader), so the training thread copies
// nothing on the host: next_into() sends the batch's bytes (a quarter of
// its f32 size) to one of `depth` device buffers on a separate copy stream,
// makes the step's stream wait for that copy (on the device, through an
// event) and converts the bytes to f32 into the step's input there. While
// the GPU runs step k the host is already sending batch k+1. The host never
// waits for the GPU except to stay at most one step ahead of it, which keeps
// host-side step timing meaningful. On the CPU, next_into() converts the
// loader's batch into the destination.
//
// The batches and their order are exactly the loader's (the conversion is
// v / 255 in f32 on either device).
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
  // before any work enqueued next on ctx's stream. Throws ShapeError when
  // the loader's batches or the destination do not match `shape`, and
  // rethrows the loader's errors.
  void next_into(Context& ctx, Tensor& destination);
  // Seconds next_into() has spent waiting for the loader to finish a batch,
  // in total: when it grows with the steps, the loader is what limits them.
  double seconds_waiting_for_loader() const { return seconds_waiting_; }

 private:
  struct Pipeline;
  BatchLoader::Lease take_batch();
  BatchLoader& loader_;
  Device device_;
  Shape shape_;
  double seconds_waiting_ = 0;
  std::unique_ptr<Pipeline> pipeline_;  // CUDA only
};

}  // namespace plexus::data

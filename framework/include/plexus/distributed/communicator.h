#pragma once
// Communicator: the collectives data-parallel training needs, over the
// ranks of one job (one process or thread per device). Every rank must
// issue the same collectives in the same order.
//
// Ordering on CUDA: a collective starts after the work already enqueued on
// the Context's stream and runs on the communicator's own stream, so the
// Context's stream goes on with other work meanwhile (the overlap of the
// gradient all-reduce with the rest of backward); join(ctx) makes the
// Context's later work wait for every collective issued so far, without a
// host wait. On the CPU the collectives complete before they return.
#include <string>

#include "plexus/context.h"
#include "plexus/tensor.h"

namespace plexus::distributed {

enum class Reduction { sum, average };

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // "nccl" or "in-process".
  virtual std::string kind() const = 0;

  // buffer = the sum (or the mean) of every rank's buffer, on every rank.
  // f32 tensors of equal size on every rank; otherwise a ConfigError.
  virtual void all_reduce(Context& ctx, Tensor& buffer, Reduction reduction) = 0;
  // buffer = root's buffer, on every rank.
  virtual void broadcast(Context& ctx, Tensor& buffer, int root) = 0;
  // Makes the work enqueued on ctx from now on wait for every collective
  // issued so far (CUDA: stream order only; the CPU: nothing to do).
  virtual void join(Context& ctx) = 0;
  // Blocks the host until every collective issued so far has finished.
  // Throws Error naming this rank when a peer failed or when it takes longer
  // than the communicator's timeout (a rank that died), so no rank hangs.
  virtual void synchronize() = 0;
  // Returns once every rank has called it (with the same timeout).
  virtual void barrier() = 0;
  // After each training step enqueued on ctx: marks the step's end on ctx's
  // stream, then blocks the host until the step marked two calls earlier
  // has finished, with synchronize()'s timeout and error checks. For steps
  // replayed from a CUDA graph, whose recorded collectives synchronize()
  // does not see otherwise: the host stays at most two steps ahead of the
  // device (the next step's launch is queued while this one runs), a dead
  // peer is noticed within the timeout, and synchronize() from now on also
  // waits for everything enqueued on ctx up to the mark. CPU: nothing.
  virtual void mark_step(Context& ctx) = 0;
};

// The checks every implementation makes on a collective's buffer.
void check_collective_buffer(const Tensor& buffer, const Device& communicator_device, const char* collective);

}  // namespace plexus::distributed

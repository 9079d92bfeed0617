#pragma once
// StepMetrics: a training loop's per-step scalars, kept where they are
// computed. Each record() adds the step's loss terms (scalar blobs) and their
// weighted sum, loss = sum_k weight_k * term_k, to a window, and notes the
// first step whose loss is NaN or infinite. On CUDA that is one tiny kernel
// on the context's stream (so it can be part of a CUDA graph) and nothing is
// read back until read(), which synchronises: once per log line instead of
// once per step. On the CPU it is plain host arithmetic, in the same order.
#include <cstdint>
#include <vector>

#include "plexus/context.h"
#include "plexus/tensor.h"

namespace plexus {

class StepMetrics {
 public:
  static constexpr int kMaxTerms = 4;
  // `weights` gives one weight per term (1 to kMaxTerms); `steps_before` is
  // the number of steps taken before the first record() (a resumed run's
  // step), so recorded step numbers continue from it. Throws ConfigError for
  // a bad number of weights.
  StepMetrics(Device device, std::vector<double> weights, std::int64_t steps_before = 0);

  // Adds one step: `terms` are scalar tensors on `device`, one per weight.
  void record(Context& ctx, const std::vector<const Tensor*>& terms);

  struct Window {
    std::int64_t steps = 0;      // records in this window
    std::int64_t last_step = 0;  // number of the last recorded step (1-based, counting steps_before)
    double loss_sum = 0;
    std::vector<double> term_sums;
    double last_loss = 0;  // the last recorded step's values
    std::vector<double> last_terms;
    std::int64_t first_bad_step = 0;  // first step with a non-finite loss, 0 if none so far (never reset)
    double bad_loss = 0;              // that step's values
    std::vector<double> bad_terms;
  };
  // The window since the last read (which this call closes); synchronises.
  Window read(Context& ctx);
  // The same, leaving the window open.
  Window peek(Context& ctx);
  // Only the divergence record: 0, or the first step with a non-finite loss. Synchronises.
  std::int64_t first_bad_step(Context& ctx);

 private:
  // The record, laid out in one f64 tensor on `device`:
  // [steps, window steps, first bad, loss sum, term sums.., last loss,
  //  last terms.., bad loss, bad terms..].
  std::vector<double> read_record(Context& ctx);
  Window window_of(const std::vector<double>& record) const;
  std::vector<double> weights_;
  Tensor record_;
};

namespace cuda {
// The CUDA half of StepMetrics::record (framework/src/cuda/step_metrics.cu):
// the same update of `record` from the terms' device values.
void record_step_metrics(Context& ctx, Tensor& record, const std::vector<const Tensor*>& terms,
                         const std::vector<double>& weights);
}  // namespace cuda

}  // namespace plexus

// The CUDA half of StepMetrics::record (plexus/step_metrics.h).
#include "plexus/cuda/cuda_check.h"
#include "plexus/cuda/cuda_context.h"
#include "plexus/step_metrics.h"

namespace plexus::cuda {

namespace {

struct Terms {
  const void* value[StepMetrics::kMaxTerms];
  bool is_f64[StepMetrics::kMaxTerms];
  double weight[StepMetrics::kMaxTerms];
  int count;
};

__device__ double term_value(const Terms& terms, int k) {
  return terms.is_f64[k] ? *static_cast<const double*>(terms.value[k])
                         : static_cast<double>(*static_cast<const float*>(terms.value[k]));
}

// r = [steps, window steps, first bad, loss sum, term sums.., last loss,
//      last terms.., bad loss, bad terms..]; loss = sum_k w_k t_k, left to
// right with round-to-nearest multiplies and adds (no FMA contraction), so
// the sums equal the CPU path's bit for bit.
__global__ void record_kernel(double* r, Terms terms) {
  const int n = terms.count;
  double loss = 0;
  for (int k = 0; k < n; ++k) loss = __dadd_rn(loss, __dmul_rn(terms.weight[k], term_value(terms, k)));
  r[0] += 1;
  r[1] += 1;
  r[3] += loss;
  r[4 + n] = loss;
  for (int k = 0; k < n; ++k) {
    const double t = term_value(terms, k);
    r[4 + k] += t;
    r[5 + n + k] = t;
  }
  if (!isfinite(loss) && r[2] == 0) {
    r[2] = r[0];
    r[5 + 2 * n] = loss;
    for (int k = 0; k < n; ++k) r[6 + 2 * n + k] = term_value(terms, k);
  }
}

}  // namespace

// One thread: a handful of scalars, read where the losses were computed.
void record_step_metrics(Context& ctx, Tensor& record, const std::vector<const Tensor*>& terms,
                         const std::vector<double>& weights) {
  Terms packed{};
  packed.count = static_cast<int>(terms.size());
  for (int k = 0; k < packed.count; ++k) {
    packed.value[k] = terms[k]->raw_data();
    packed.is_f64[k] = terms[k]->dtype() == DType::f64;
    packed.weight[k] = weights[k];
  }
  record_kernel<<<1, 1, 0, stream(ctx)>>>(record.data<double>(), packed);
  check_launch("record_kernel", __FILE__, __LINE__);
}

}  // namespace plexus::cuda

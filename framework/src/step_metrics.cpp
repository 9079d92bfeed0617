#include "plexus/step_metrics.h"

#include <cmath>

#include "plexus/error.h"

namespace plexus {

namespace {

// Offsets into the record (see step_metrics.h).
struct Layout {
  int terms;
  int steps() const { return 0; }
  int window_steps() const { return 1; }
  int first_bad() const { return 2; }
  int loss_sum() const { return 3; }
  int term_sums() const { return 4; }
  int last_loss() const { return 4 + terms; }
  int last_terms() const { return 5 + terms; }
  int bad_loss() const { return 5 + 2 * terms; }
  int bad_terms() const { return 6 + 2 * terms; }
  int size() const { return 6 + 3 * terms; }
};

double value_of(const Tensor& scalar) {
  return scalar.dtype() == DType::f64 ? *scalar.data<double>() : static_cast<double>(*scalar.data<float>());
}

}  // namespace

StepMetrics::StepMetrics(Device device, std::vector<double> weights, std::int64_t steps_before)
    : weights_(std::move(weights)) {
  if (weights_.empty() || weights_.size() > static_cast<std::size_t>(kMaxTerms))
    throw ConfigError("StepMetrics takes 1 to " + std::to_string(kMaxTerms) + " loss terms, got " +
                      std::to_string(weights_.size()));
  const Layout at{static_cast<int>(weights_.size())};
  std::vector<double> initial(static_cast<std::size_t>(at.size()), 0.0);
  initial[at.steps()] = static_cast<double>(steps_before);  // exact below 2^53 steps
  record_ = Tensor::from_values(initial, {at.size()}, DType::f64, device);
}

void StepMetrics::record([[maybe_unused]] Context& ctx, const std::vector<const Tensor*>& terms) {
  if (terms.size() != weights_.size())
    throw Error("StepMetrics::record: " + std::to_string(terms.size()) + " term(s) given for " +
                std::to_string(weights_.size()) + " weight(s)");
  for (const Tensor* term : terms)
    if (!term || term->numel() != 1 || term->device() != record_.device())
      throw ShapeError("StepMetrics::record: a term is " + (term ? term->describe() : std::string("null")) +
                       ", not a scalar on " + record_.device().str());
#if PLEXUS_WITH_CUDA
  if (record_.device().is_cuda()) {
    cuda::record_step_metrics(ctx, record_, terms, weights_);
    return;
  }
#endif
  // The same arithmetic as the CUDA kernel: loss = sum_k w_k t_k, left to right.
  const Layout at{static_cast<int>(weights_.size())};
  double* r = record_.data<double>();
  double loss = 0;
  for (std::size_t k = 0; k < terms.size(); ++k) loss += weights_[k] * value_of(*terms[k]);
  r[at.steps()] += 1;
  r[at.window_steps()] += 1;
  r[at.loss_sum()] += loss;
  r[at.last_loss()] = loss;
  for (int k = 0; k < at.terms; ++k) {
    const double t = value_of(*terms[k]);
    r[at.term_sums() + k] += t;
    r[at.last_terms() + k] = t;
  }
  if (!std::isfinite(loss) && r[at.first_bad()] == 0) {
    r[at.first_bad()] = r[at.steps()];
    r[at.bad_loss()] = loss;
    for (int k = 0; k < at.terms; ++k) r[at.bad_terms() + k] = value_of(*terms[k]);
  }
}

std::vector<double> StepMetrics::read_record(Context& ctx) {
  ctx.synchronize();
  return record_.to_values();
}

StepMetrics::Window StepMetrics::window_of(const std::vector<double>& r) const {
  const Layout at{static_cast<int>(weights_.size())};
  Window w;
  w.steps = static_cast<std::int64_t>(r[at.window_steps()]);
  w.last_step = static_cast<std::int64_t>(r[at.steps()]);
  w.loss_sum = r[at.loss_sum()];
  w.last_loss = r[at.last_loss()];
  w.first_bad_step = static_cast<std::int64_t>(r[at.first_bad()]);
  w.bad_loss = r[at.bad_loss()];
  for (int k = 0; k < at.terms; ++k) {
    w.term_sums.push_back(r[at.term_sums() + k]);
    w.last_terms.push_back(r[at.last_terms() + k]);
    w.bad_terms.push_back(r[at.bad_terms() + k]);
  }
  return w;
}

StepMetrics::Window StepMetrics::peek(Context& ctx) { return window_of(read_record(ctx)); }

StepMetrics::Window StepMetrics::read(Context& ctx) {
  const Layout at{static_cast<int>(weights_.size())};
  std::vector<double> r = read_record(ctx);
  Window w = window_of(r);
  // A new window: the sums restart, the rest carries on.
  r[at.window_steps()] = 0;
  r[at.loss_sum()] = 0;
  for (int k = 0; k < at.terms; ++k) r[at.term_sums() + k] = 0;
  record_.copy_from(Tensor::from_values(r, {at.size()}, DType::f64));
  return w;
}

std::int64_t StepMetrics::first_bad_step(Context& ctx) {
  const Layout at{static_cast<int>(weights_.size())};
  return static_cast<std::int64_t>(read_record(ctx)[at.first_bad()]);
}

}  // namespace plexus

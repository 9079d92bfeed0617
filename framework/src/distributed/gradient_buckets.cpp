#include "plexus/distributed/gradient_buckets.h"

#include <algorithm>

#include "plexus/error.h"

namespace plexus::distributed {

namespace {

struct Gradient {
  std::string node;
  Parameter* parameter;
  std::size_t bytes;
};

// The trainable parameters in the order backward finishes their gradients.
std::vector<Gradient> gradients_in_backward_order(Net& net) {
  std::vector<std::string> order = net.execution_order();
  std::reverse(order.begin(), order.end());
  std::vector<Gradient> gradients;
  for (const std::string& node : order)
    for (Parameter* parameter : net.layer(node).parameters())
      if (parameter->trainable) gradients.push_back({node, parameter, parameter->grad.nbytes()});
  return gradients;
}

// Where the final bucket starts: the longest tail of `gradients` within
// `cap` bytes, and at least the last gradient.
std::size_t final_bucket_start(const std::vector<Gradient>& gradients, std::size_t cap) {
  std::size_t start = gradients.size(), bytes = 0;
  while (start > 0 && (start == gradients.size() || bytes + gradients[start - 1].bytes <= cap))
    bytes += gradients[--start].bytes;
  return start;
}

}  // namespace

GradientBuckets::GradientBuckets(Net& net, Communicator& communicator, std::size_t bucket_bytes,
                                 std::size_t final_bucket_bytes)
    : net_(net), communicator_(communicator) {
  if (net.dtype() != DType::f32)
    throw ConfigError("data-parallel training reduces f32 gradients; the net is " +
                      std::string(dtype_name(net.dtype())));
  if (bucket_bytes == 0) throw ConfigError("the gradient bucket size must be > 0 bytes");
  if (final_bucket_bytes == 0) throw ConfigError("the final gradient bucket's size must be > 0 bytes");
  const std::vector<Gradient> gradients = gradients_in_backward_order(net);
  const std::size_t final_start = final_bucket_start(gradients, std::min(bucket_bytes, final_bucket_bytes));
  std::size_t bytes = 0;
  for (std::size_t i = 0; i < gradients.size(); ++i) {
    const Gradient& g = gradients[i];
    if (buckets_.empty() || i == final_start || (bytes > 0 && bytes + g.bytes > bucket_bytes)) {
      buckets_.emplace_back();
      bytes = 0;
    }
    buckets_.back().parameters.push_back({g.node + "." + g.parameter->name, g.parameter});
    buckets_.back().elements += g.parameter->grad.numel();
    bytes += g.bytes;
    node_buckets_[g.node].push_back(static_cast<int>(buckets_.size()) - 1);
  }
  // Each gradient becomes a view into its bucket's buffer (its values kept),
  // so a bucket is reduced in place, with no packing or unpacking.
  for (const Bucket& bucket : buckets_) {
    Tensor& flat = flat_.emplace_back(Shape{bucket.elements}, DType::f32, net.device());
    std::int64_t offset = 0;
    for (const NamedParameter& named : bucket.parameters) {
      Tensor& grad = named.parameter->grad;
      Tensor view = flat.elements_view(offset, grad.shape());
      view.copy_from(grad);
      grad = view;
      offset += grad.numel();
    }
    pending_.push_back(static_cast<int>(bucket.parameters.size()));
  }
  net_.set_gradients_ready_hook([this](Context& ctx, const std::string& node) { on_node_ready(ctx, node); });
}

GradientBuckets::~GradientBuckets() { net_.set_gradients_ready_hook(nullptr); }

void GradientBuckets::on_node_ready(Context& ctx, const std::string& node) {
  auto it = node_buckets_.find(node);
  if (it == node_buckets_.end()) return;  // a node without trainable parameters
  for (int bucket : it->second) --pending_[bucket];
  while (next_ < static_cast<int>(buckets_.size()) && pending_[next_] == 0) {
    issue(ctx, next_++);
    ++during_backward_;
  }
}

void GradientBuckets::issue(Context& ctx, int bucket) {
  Tensor& flat = flat_[bucket];
  std::int64_t offset = 0;
  for (const NamedParameter& named : buckets_[bucket].parameters) {
    const Tensor& grad = named.parameter->grad;
    if (grad.raw_data() != flat.elements_view(offset, grad.shape()).raw_data())
      throw Error("the gradient of " + named.name +
                  " was reallocated after the gradient buckets were built, so "
                  "reducing its bucket would miss it; build the buckets after the parameters are final");
    offset += grad.numel();
  }
  // The bucket's last gradients may still be summed on a stream branch
  // (Net::GradientsReadyHook): the all-reduce starts after them.
  ctx.join_branches();
  communicator_.all_reduce(ctx, flat, Reduction::average);
  ++reductions_issued_;
  pass_order_.push_back(bucket);
}

void GradientBuckets::finish(Context& ctx) {
  while (next_ < static_cast<int>(buckets_.size())) issue(ctx, next_++);
  communicator_.join(ctx);  // the gradients, averaged in place, are read after this
  for (std::size_t b = 0; b < buckets_.size(); ++b) pending_[b] = static_cast<int>(buckets_[b].parameters.size());
  next_ = 0;
  last_pass_order_ = std::move(pass_order_);
  pass_order_.clear();
  last_pass_during_backward_ = during_backward_;
  during_backward_ = 0;
}

}  // namespace plexus::distributed

#pragma once
// GradientBuckets: the gradient all-reduce of data-parallel training,
// overlapped with backward.
//
// The trainable parameters are grouped into buckets of about `bucket_bytes`
// in reverse execution order, the order in which backward finishes their
// gradients, except that the last of them (the first layers') get a bucket
// of their own, of at most `final_bucket_bytes`: its all-reduce, after the
// last backward node, is the one that cannot overlap backward, so the
// smaller it is the shorter the step. Each bucket owns one flat buffer, and
// its parameters' gradient tensors become views into it
// (Tensor::elements_view), so backward writes the gradients straight into
// the buffer. When the last gradient of a
// bucket is final (Net's gradients-ready hook, called after each node's
// backward), the buffer is all-reduced (averaged) in place by the
// communicator, on its own stream on CUDA, while backward goes on with the
// earlier layers. finish() issues whatever is left and makes the context
// wait for the reductions. Buckets are issued strictly in index order, so
// every rank issues the same collectives in the same order.
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "plexus/distributed/communicator.h"
#include "plexus/net.h"

namespace plexus::distributed {

class GradientBuckets {
 public:
  // 4 MiB: the 2018 models' 3 to 5 million gradients make several buckets,
  // so all but the last overlap backward (docs/multi-gpu.md, measured).
  static constexpr std::size_t kDefaultBucketBytes = std::size_t{4} << 20;
  // 256 KiB: small enough to take little longer than an all-reduce's fixed
  // cost, large enough for the first layer of an image model (a 5x5
  // convolution from RGB to 192 channels and its GDN: 205 KiB).
  static constexpr std::size_t kDefaultFinalBucketBytes = std::size_t{256} << 10;

  struct Bucket {
    std::vector<NamedParameter> parameters;  // in packing order
    std::int64_t elements = 0;
  };

  // Installs itself as net's gradients-ready hook (the destructor removes
  // it) and moves every trainable gradient into its bucket's buffer (the
  // gradients stay there after the destructor). The final bucket holds at
  // least one parameter and at most min(final_bucket_bytes, bucket_bytes)
  // unless that one parameter is larger. ConfigError for a net that is not
  // f32 or a bucket_bytes or final_bucket_bytes of 0. A gradient reallocated
  // later is an Error naming it when its bucket is reduced.
  GradientBuckets(Net& net, Communicator& communicator, std::size_t bucket_bytes = kDefaultBucketBytes,
                  std::size_t final_bucket_bytes = kDefaultFinalBucketBytes);
  ~GradientBuckets();
  GradientBuckets(const GradientBuckets&) = delete;
  GradientBuckets& operator=(const GradientBuckets&) = delete;

  const std::vector<Bucket>& buckets() const { return buckets_; }
  // After backward: reduces the buckets not issued yet and makes ctx's later
  // work wait for every reduction, after which the parameters' gradients
  // are the means over the ranks. The next backward starts a new pass.
  void finish(Context& ctx);
  // All-reduces issued since construction, and the bucket order of the last
  // finished pass, with how many of them backward's hook issued (the rest
  // finish() did).
  std::int64_t reductions_issued() const { return reductions_issued_; }
  const std::vector<int>& last_pass_order() const { return last_pass_order_; }
  int last_pass_issued_during_backward() const { return last_pass_during_backward_; }

 private:
  void on_node_ready(Context& ctx, const std::string& node);
  void issue(Context& ctx, int bucket);
  Net& net_;
  Communicator& communicator_;
  std::vector<Bucket> buckets_;
  std::vector<Tensor> flat_;                              // one buffer per bucket, holding its gradients
  std::map<std::string, std::vector<int>> node_buckets_;  // node -> the bucket of each of its parameters
  std::vector<int> pending_;                              // gradients of each bucket not final yet in this pass
  int next_ = 0;                                          // the next bucket to issue
  std::int64_t reductions_issued_ = 0;
  std::vector<int> pass_order_, last_pass_order_;
  int during_backward_ = 0, last_pass_during_backward_ = 0;
};

}  // namespace plexus::distributed

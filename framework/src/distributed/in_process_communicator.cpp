#include "plexus/distributed/in_process_communicator.h"

#include <algorithm>
#include <cstring>

#include "plexus/error.h"

namespace plexus::distributed {

void check_collective_buffer(const Tensor& buffer, const Device& communicator_device, const char* collective) {
  if (!buffer.defined()) throw ConfigError(std::string(collective) + ": the buffer is an empty tensor");
  if (buffer.dtype() != DType::f32)
    throw ConfigError(std::string(collective) + ": the buffer is " + buffer.describe() + "; only f32 is supported");
  if (buffer.device() != communicator_device)
    throw ConfigError(std::string(collective) + ": the buffer is " + buffer.describe() +
                      " but the communicator works on " + communicator_device.str());
}

class InProcessCommunicator : public Communicator {
 public:
  InProcessCommunicator(InProcessGroup& group, int rank) : group_(group), rank_(rank) {}
  int rank() const override { return rank_; }
  int world_size() const override { return group_.world_size(); }
  std::string kind() const override { return "in-process"; }

  // Three phases: every rank publishes its buffer; rank r sums its share
  // [r n / N, (r + 1) n / N) of the elements over the ranks in rank order;
  // every rank copies the sums back. The last barrier keeps the shared
  // buffers alive until every rank has copied.
  void all_reduce(Context&, Tensor& buffer, Reduction reduction) override {
    check_collective_buffer(buffer, Device::cpu(), "all_reduce");
    const std::size_t n = static_cast<std::size_t>(buffer.numel());
    publish(buffer, "all_reduce");
    {
      std::lock_guard<std::mutex> lock(group_.mutex_);
      if (group_.reduced_.size() < n) group_.reduced_.resize(n);
    }
    group_.arrive_and_wait(rank_, "all_reduce");
    check_equal_sizes("all_reduce");
    const int ranks = group_.world_size();
    const std::size_t begin = n * rank_ / ranks, end = n * (rank_ + 1) / ranks;
    for (std::size_t i = begin; i < end; ++i) {
      float sum = 0;
      for (int r = 0; r < ranks; ++r) sum += group_.buffers_[r]->data<float>()[i];
      group_.reduced_[i] = reduction == Reduction::average ? sum / static_cast<float>(ranks) : sum;
    }
    group_.arrive_and_wait(rank_, "all_reduce");
    std::memcpy(buffer.data<float>(), group_.reduced_.data(), n * sizeof(float));
    group_.arrive_and_wait(rank_, "all_reduce");
  }

  void broadcast(Context&, Tensor& buffer, int root) override {
    check_collective_buffer(buffer, Device::cpu(), "broadcast");
    if (root < 0 || root >= world_size())
      throw ConfigError("broadcast: root rank " + std::to_string(root) + " is not in [0, " +
                        std::to_string(world_size()) + ")");
    publish(buffer, "broadcast");
    group_.arrive_and_wait(rank_, "broadcast");
    check_equal_sizes("broadcast");
    if (rank_ != root) std::memcpy(buffer.data<float>(), group_.buffers_[root]->data<float>(), buffer.nbytes());
    group_.arrive_and_wait(rank_, "broadcast");
  }

  void join(Context&) override {}  // collectives complete before they return
  void synchronize() override {}
  void mark_step(Context&) override {}  // the CPU runs each step before the next is enqueued
  void barrier() override { group_.arrive_and_wait(rank_, "barrier"); }

 private:
  void publish(Tensor& buffer, const char* what) {
    std::lock_guard<std::mutex> lock(group_.mutex_);
    if (!group_.aborted_.empty())
      throw Error("rank " + std::to_string(rank_) + ": " + what + " after the group was aborted: " + group_.aborted_);
    group_.buffers_[rank_] = &buffer;
    group_.sizes_[rank_] = buffer.numel();
  }
  // Every rank makes the same comparison, so all of them throw or none. The
  // sizes are copies: a rank that threw has already freed its buffer.
  void check_equal_sizes(const char* what) const {
    const auto& sizes = group_.sizes_;
    for (int r = 0; r < world_size(); ++r)
      if (sizes[r] != sizes[0])
        throw ConfigError(std::string(what) + ": rank " + std::to_string(r) + " passed " + std::to_string(sizes[r]) +
                          " elements but rank 0 passed " + std::to_string(sizes[0]));
  }
  InProcessGroup& group_;
  const int rank_;
};

InProcessGroup::InProcessGroup(int world_size, std::chrono::milliseconds timeout)
    : world_size_(world_size), timeout_(timeout) {
  if (world_size < 1) throw ConfigError("an in-process group needs at least 1 rank, got " + std::to_string(world_size));
  buffers_.assign(static_cast<std::size_t>(world_size), nullptr);
  sizes_.assign(static_cast<std::size_t>(world_size), 0);
}

std::unique_ptr<Communicator> InProcessGroup::communicator(int rank) {
  if (rank < 0 || rank >= world_size_)
    throw ConfigError("rank " + std::to_string(rank) + " is not in [0, " + std::to_string(world_size_) + ")");
  return std::make_unique<InProcessCommunicator>(*this, rank);
}

void InProcessGroup::abort(const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (aborted_.empty()) aborted_ = reason;
  }
  arrived_.notify_all();
}

void InProcessGroup::arrive_and_wait(int rank, const char* what) {
  std::unique_lock<std::mutex> lock(mutex_);
  auto failure = [&](const std::string& why) {
    return Error("rank " + std::to_string(rank) + ": " + what + " abandoned: " + why);
  };
  if (!aborted_.empty()) throw failure(aborted_);
  const std::uint64_t generation = generation_;
  if (++waiting_ == world_size_) {
    waiting_ = 0;
    ++generation_;
    arrived_.notify_all();
    return;
  }
  const bool released =
      arrived_.wait_for(lock, timeout_, [&] { return generation_ != generation || !aborted_.empty(); });
  if (released && generation_ != generation) return;
  if (!released && aborted_.empty()) {
    aborted_ = "rank " + std::to_string(rank) + " waited more than " + std::to_string(timeout_.count()) +
               " ms for the other ranks";
    arrived_.notify_all();
  }
  throw failure(aborted_);
}

}  // namespace plexus::distributed

#pragma once
// This process's part in data-parallel training (one worker per GPU, see
// worker_launch.h): the communicator it joins, and the decisions every rank
// must take alike.
#include <cstddef>
#include <memory>
#include <string>

#include "plexus/context.h"
#include "plexus/distributed/agreement.h"
#include "plexus/distributed/communicator.h"
#include "plexus/distributed/in_process_communicator.h"
#include "plexus/distributed/mpi_communicator.h"
#include "plexus/train/worker_environment.h"

namespace plexus::train {

// --gradient-bucket-mb's range, from 1 KiB to 1 GiB, and its default: the
// framework's GradientBuckets::kDefaultBucketBytes (data_parallel.cpp checks it).
constexpr double kMinGradientBucketMb = 1.0 / 1024, kMaxGradientBucketMb = 1024;
inline constexpr double kDefaultGradientBucketMb = 4;
constexpr std::size_t gradient_bucket_bytes(double mb) { return static_cast<std::size_t>(mb * 1024 * 1024); }

class DataParallelRank {
 public:
  // Decisions are agreed after step kFirstAgreementStep, then about every
  // kAgreementSeconds (agreement_interval): often enough that Ctrl-C and
  // --time-limit act within a fraction of a second, rarely enough that the
  // wait for the device each agreement takes costs little. The replicas'
  // checks run on their own schedule (--replica-check-every).
  static constexpr std::int64_t kFirstAgreementStep = 10;
  static constexpr double kAgreementSeconds = 0.25;

  // Joins the job. On a CUDA device through NCCL, whose id reaches the
  // ranks through PLEXUS_RENDEZVOUS's file when it is given, else through
  // the TCP rendezvous at torchrun's MASTER_ADDR (nccl_communicator.h; on
  // WorkerEnvironment::rendezvous_port()) when they are set, else through
  // MPI (ranks started by an MPI launcher or srun, in a build with MPI); a
  // world of one rank needs none of them. On
  // the CPU, one rank is an in-process group of one; several meet through
  // MPI. Waits up to `timeout_seconds` for the other ranks.
  DataParallelRank(const WorkerEnvironment& environment, Device device, double timeout_seconds);
  distributed::Communicator& communicator() { return *active_; }
  int rank() const { return active_->rank(); }
  int world_size() const { return active_->world_size(); }

  // Whether to stop, --time-limit, the schedule's clock and the steps to
  // the next agreement (those of kAgreementSeconds at rank 0's
  // `seconds_per_step`), agreed over the ranks
  // (plexus/distributed/agreement.h). Collective; waits for the device.
  distributed::Agreement agree(Context& ctx, bool stop, bool out_of_time, double seconds, double seconds_per_step) {
    return distributed::agree(ctx, *active_, stop, out_of_time, seconds,
                              distributed::agreement_interval(kAgreementSeconds, seconds_per_step));
  }

 private:
  std::unique_ptr<distributed::InProcessGroup> group_;
  std::unique_ptr<distributed::MpiCommunicator> mpi_;        // outlives NCCL, whose bootstrap it was
  std::unique_ptr<distributed::Communicator> communicator_;  // NCCL's or the in-process group's
  distributed::Communicator* active_ = nullptr;              // the one the ranks train through
};

// Whether the ranks of `environment` can train on the CPU: "" when they can
// (one rank, or several started by an MPI launcher or srun in a build with
// MPI), otherwise what is missing, as a sentence to show the user.
std::string why_cpu_ranks_cannot_meet(const WorkerEnvironment& environment);

}  // namespace plexus::train

#include "plexus/train/data_parallel.h"

#include <spdlog/spdlog.h>

#include "plexus/distributed/gradient_buckets.h"
#include "plexus/distributed/nccl_communicator.h"

namespace plexus::train {

static_assert(gradient_bucket_bytes(kDefaultGradientBucketMb) == distributed::GradientBuckets::kDefaultBucketBytes,
              "--gradient-bucket-mb's default is the framework's gradient bucket");

DataParallelRank::DataParallelRank(const WorkerEnvironment& environment, Device device, double timeout_seconds) {
  if (device.is_cpu()) {
    group_ = std::make_unique<distributed::InProcessGroup>(1);
    communicator_ = group_->communicator(0);
  } else {
    distributed::NcclSetup setup;
    setup.rank = environment.rank;
    setup.world_size = environment.world_size;
    setup.rendezvous_file = environment.rendezvous_file;
    setup.device = device.index;
    setup.timeout_seconds = timeout_seconds;
    communicator_ = distributed::make_nccl_communicator(setup);
  }
  spdlog::info("data-parallel rank {} of {} on {} ({}{})", environment.rank, environment.world_size, device.str(),
               communicator_->kind(),
               communicator_->kind() == "nccl" ? " " + distributed::nccl_version() : std::string());
}

}  // namespace plexus::train

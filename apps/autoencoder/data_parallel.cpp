#include "data_parallel.h"

#include <spdlog/spdlog.h>

#include "plexus/distributed/gradient_buckets.h"
#include "plexus/distributed/nccl_communicator.h"
#include "plexus/error.h"
#include "session.h"

namespace plexus::ae {

static_assert(gradient_bucket_bytes(kDefaultGradientBucketMb) == distributed::GradientBuckets::kDefaultBucketBytes,
              "plexus-ae's default gradient bucket is the framework's");

void check_gpus_option(const TrainOptions& o) {
  if (o.gpus < 0 || o.gpus > kMaxWorkers)
    throw ConfigError("--gpus must be in [0, " + std::to_string(kMaxWorkers) + "] (0: one process, no data "
                      "parallelism), got " + std::to_string(o.gpus));
  if (o.gpus == 0) return;
  if (!(o.rank_timeout > 0)) throw ConfigError("--rank-timeout must be > 0 seconds, got " + std::to_string(o.rank_timeout));
  if (!(o.gradient_bucket_mb >= kMinGradientBucketMb && o.gradient_bucket_mb <= kMaxGradientBucketMb))
    throw ConfigError(fmt::format("--gradient-bucket-mb must be in [{}, {}] MiB, got {}", kMinGradientBucketMb,
                                  kMaxGradientBucketMb, o.gradient_bucket_mb));
  const std::string n = std::to_string(o.gpus);
  if (o.device == "cpu") {
    if (o.gpus > 1)
      throw ConfigError("--gpus " + n + " with --device cpu: data-parallel training runs one worker per GPU; on the "
                        "CPU only --gpus 1 (one worker, to check the data-parallel path) is possible");
    return;
  }
  if (o.device != "auto" && o.device != "cuda")
    throw ConfigError("--gpus " + n + " trains on cuda:0 to cuda:" + std::to_string(o.gpus - 1) +
                      " (set CUDA_VISIBLE_DEVICES to choose them): give --device auto or cuda, not '" + o.device + "'");
  if (!distributed::built_with_nccl())
    throw ConfigError("--gpus " + n + " needs NCCL, and this build of plexus-ae has none: install NCCL (libnccl-dev from "
                      "NVIDIA's CUDA package repository, or the nvidia-nccl Python wheel) and rebuild, with -DNCCL_ROOT=<prefix> if "
                      "CMake does not find it");
  const Device last = choose_device("cuda:" + std::to_string(o.gpus - 1));  // DeviceError: fewer GPUs visible
  (void)last;
}

Device worker_device(const TrainOptions& o, const WorkerEnvironment& environment) {
  if (o.gpus != 0 && o.gpus != environment.world_size)
    throw ConfigError("--gpus " + std::to_string(o.gpus) + " but " + kWorldSizeVariable + "=" +
                      std::to_string(environment.world_size));
  if (o.device == "cpu") {
    if (environment.world_size > 1)
      throw ConfigError("--device cpu in a data-parallel job of " + std::to_string(environment.world_size) +
                        " ranks: only a single worker can run on the CPU");
    return Device::cpu();
  }
  if (o.device != "auto" && o.device != "cuda")
    throw ConfigError("a data-parallel worker trains on cuda:RANK: give --device auto or cuda, not '" + o.device + "'");
  return choose_device("cuda:" + std::to_string(environment.rank));
}

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

}  // namespace plexus::ae

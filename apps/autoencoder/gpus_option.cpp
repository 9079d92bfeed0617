#include "gpus_option.h"

#include <spdlog/spdlog.h>

#include "plexus/distributed/nccl_communicator.h"
#include "plexus/error.h"
#include "plexus/train/data_parallel.h"
#include "session.h"

namespace plexus::ae {

void check_gpus_option(const TrainOptions& o) {
  if (o.gpus < 0 || o.gpus > train::kMaxWorkers)
    throw ConfigError("--gpus must be in [0, " + std::to_string(train::kMaxWorkers) +
                      "] (0: one process, no data "
                      "parallelism), got " +
                      std::to_string(o.gpus));
  if (o.gpus == 0) return;
  if (!(o.rank_timeout > 0))
    throw ConfigError("--rank-timeout must be > 0 seconds, got " + std::to_string(o.rank_timeout));
  if (!(o.gradient_bucket_mb >= train::kMinGradientBucketMb && o.gradient_bucket_mb <= train::kMaxGradientBucketMb))
    throw ConfigError(fmt::format("--gradient-bucket-mb must be in [{}, {}] MiB, got {}", train::kMinGradientBucketMb,
                                  train::kMaxGradientBucketMb, o.gradient_bucket_mb));
  const std::string n = std::to_string(o.gpus);
  if (o.device == "cpu") {
    if (o.gpus > 1)
      throw ConfigError("--gpus " + n +
                        " with --device cpu: data-parallel training runs one worker per GPU; on the "
                        "CPU only --gpus 1 (one worker, to check the data-parallel path) is possible");
    return;
  }
  if (o.device != "auto" && o.device != "cuda")
    throw ConfigError("--gpus " + n + " trains on cuda:0 to cuda:" + std::to_string(o.gpus - 1) +
                      " (set CUDA_VISIBLE_DEVICES to choose them): give --device auto or cuda, not '" + o.device + "'");
  if (!distributed::built_with_nccl())
    throw ConfigError(
        "--gpus " + n +
        " needs NCCL, and this build of plexus-ae has none: install NCCL (libnccl-dev from "
        "NVIDIA's CUDA package repository, or the nvidia-nccl Python wheel) and rebuild, with -DNCCL_ROOT=<prefix> if "
        "CMake does not find it");
  const Device last = choose_device("cuda:" + std::to_string(o.gpus - 1));  // DeviceError: fewer GPUs visible
  (void)last;
}

Device worker_device(const TrainOptions& o, const train::WorkerEnvironment& environment) {
  const std::string size = std::to_string(environment.world_size);
  if (o.gpus != 0 && o.gpus != environment.world_size) {
    if (environment.launcher == train::Launcher::plexus)
      throw ConfigError("--gpus " + std::to_string(o.gpus) + " but " + train::kWorldSizeVariable + "=" + size);
    throw ConfigError("--gpus " + std::to_string(o.gpus) + ", but this process is " + environment.describe() +
                      ": --gpus starts workers of its own; leave it out and let " +
                      train::launcher_name(environment.launcher) + " start one process per GPU");
  }
  if (o.device == "cpu") {
    if (const std::string missing = train::why_cpu_ranks_cannot_meet(environment); !missing.empty())
      throw ConfigError("--device cpu in a data-parallel job of " + size + " ranks (" + environment.describe() +
                        "): " + missing);
    return Device::cpu();
  }
  if (o.device != "auto" && o.device != "cuda")
    throw ConfigError("a data-parallel worker trains on cuda:LOCAL_RANK: give --device auto or cuda, not '" + o.device +
                      "'");
  return choose_device("cuda:" + std::to_string(environment.local_rank));
}

}  // namespace plexus::ae

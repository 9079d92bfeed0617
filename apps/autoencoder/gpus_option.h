#pragma once
// --gpus N of `plexus-ae train`: its checks before any worker starts, and
// the device of each worker (the workers themselves: plexus/train/worker_launch.h).
#include "options.h"
#include "plexus/tensor.h"
#include "plexus/train/worker_environment.h"

namespace plexus::ae {

// Checks --gpus against --device, the GPUs visible and the build (NCCL),
// before any worker starts; ConfigError or DeviceError saying what to change.
void check_gpus_option(const TrainOptions& o);
// The device of a worker: cuda:LOCAL_RANK, or the CPU for the single worker
// of `--gpus 1 --device cpu` (the data-parallel path without a GPU) or the
// ranks of an MPI launch with --device cpu.
Device worker_device(const TrainOptions& o, const train::WorkerEnvironment& environment);

}  // namespace plexus::ae

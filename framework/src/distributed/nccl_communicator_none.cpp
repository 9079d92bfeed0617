// A build without NCCL: no multi-process communicator.
#include "plexus/distributed/nccl_communicator.h"

#include "plexus/error.h"

namespace plexus::distributed {

bool built_with_nccl() { return false; }
std::string nccl_version() { return ""; }

std::unique_ptr<Communicator> make_nccl_communicator(const NcclSetup&) {
  throw ConfigError("this build of Plexus has no NCCL, which training on several GPUs needs: install NCCL (libnccl-dev "
                    "from NVIDIA's CUDA package "
                    "repository, or the nvidia-nccl Python wheel) and reconfigure, with -DNCCL_ROOT=<prefix> if CMake "
                    "does not find it");
}

}  // namespace plexus::distributed

#pragma once
// Exit codes of plexus-ae: the trainer's (plexus/train/exit_codes.h), which
// the supervisor of --gpus N reads from its workers.
#include "plexus/train/exit_codes.h"

namespace plexus::ae {

using train::kExitError;        // bad input, I/O error, diverged training
using train::kExitInterrupted;  // stopped by SIGINT/SIGTERM after saving
using train::kExitOk;

}  // namespace plexus::ae

#pragma once
#include <set>
#include <string>

#include "options.h"

namespace plexus::ae {

// Exit codes of plexus-ae.
inline constexpr int kExitOk = 0;
inline constexpr int kExitError = 1;        // bad input, I/O error, diverged training
inline constexpr int kExitInterrupted = 130;  // stopped by SIGINT/SIGTERM after saving

// `plexus-ae train`. `given` holds the long names of the options set on the
// command line (on --resume, the others come from the checkpoint).
int run_train(TrainOptions options, const std::set<std::string>& given);

}  // namespace plexus::ae

#pragma once
// Data-parallel training runs one worker process per GPU. A training
// command (`plexus-ae train --gpus N`) starts N copies of itself, each with
// the environment variables of worker_environment.h, and supervises them;
// another launcher may start the workers itself by setting the same variables.
#include <string>
#include <vector>

#include "plexus/train/exit_codes.h"
#include "plexus/train/worker_environment.h"

namespace plexus::train {

// Starts `command` (command[0]: the executable) `world_size` times, worker
// r with the variables above, and waits for all of them:
// - a worker that exits with a non-zero status (other than after a stop
//   request) or dies on a signal ends the run: the others are killed, and
//   an error names the rank and how it ended;
// - SIGINT or SIGTERM to this process is passed on once to every worker
//   (the workers agree on a step, save and exit); a second one kills them.
//   A worker still starting up, that the passed-on SIGINT ends, counts as
//   stopped, not failed.
// Returns kExitOk when every worker exited 0, kExitInterrupted after a
// stop request that every worker honoured, kExitError otherwise.
int supervise_workers(const std::vector<std::string>& command, int world_size, const std::string& rendezvous_file);

}  // namespace plexus::train

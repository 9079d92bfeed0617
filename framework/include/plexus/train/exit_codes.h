#pragma once
// Exit codes of a training process, and of the supervisor of its workers
// (worker_launch.h), which reads them.
namespace plexus::train {

inline constexpr int kExitOk = 0;
inline constexpr int kExitError = 1;          // bad input, I/O error, diverged training
inline constexpr int kExitInterrupted = 130;  // stopped by SIGINT/SIGTERM after saving

}  // namespace plexus::train

#pragma once
// Exit codes of plexus-ae.
namespace plexus::ae {

inline constexpr int kExitOk = 0;
inline constexpr int kExitError = 1;          // bad input, I/O error, diverged training
inline constexpr int kExitInterrupted = 130;  // stopped by SIGINT/SIGTERM after saving

}  // namespace plexus::ae

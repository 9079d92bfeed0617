#include "plexus/train/worker_environment.h"

#include <cerrno>
#include <cstdlib>
#include <string>

#include "plexus/error.h"

namespace plexus::train {

namespace {

int parse_variable(const char* name, int low, int high) {
  const char* text = std::getenv(name);
  if (!text || !*text) throw ConfigError(std::string(name) + " is not set, but " + kRankVariable + " is");
  char* end = nullptr;
  errno = 0;
  const long value = std::strtol(text, &end, 10);
  if (errno != 0 || *end != '\0' || value < low || value > high)
    throw ConfigError(std::string(name) + "='" + text + "' is not an integer in [" + std::to_string(low) + ", " +
                      std::to_string(high) + "]");
  return static_cast<int>(value);
}

}  // namespace

std::optional<WorkerEnvironment> worker_environment() {
  if (!std::getenv(kRankVariable)) return std::nullopt;
  WorkerEnvironment environment;
  environment.world_size = parse_variable(kWorldSizeVariable, 1, kMaxWorkers);
  environment.rank = parse_variable(kRankVariable, 0, environment.world_size - 1);
  const char* rendezvous = std::getenv(kRendezvousVariable);
  if (!rendezvous || !*rendezvous)
    throw ConfigError(std::string(kRendezvousVariable) + " is not set, but " + kRankVariable +
                      " is: it names the file through which the workers meet");
  environment.rendezvous_file = rendezvous;
  return environment;
}

}  // namespace plexus::train

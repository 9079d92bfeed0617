#pragma once
// Runs one function per rank, each on its own thread with its own
// in-process communicator. A rank that throws aborts the group (so no other
// rank waits for it) and its message is returned, "" for ranks that
// succeeded.
#include <exception>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "plexus/distributed/in_process_communicator.h"

namespace plexus::testing {

inline std::vector<std::string> run_ranks(int world_size,
                                          const std::function<void(int rank, distributed::Communicator&)>& body,
                                          std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  distributed::InProcessGroup group(world_size, timeout);
  std::vector<std::string> errors(static_cast<std::size_t>(world_size));
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world_size; ++rank)
    threads.emplace_back([&, rank] {
      try {
        auto communicator = group.communicator(rank);
        body(rank, *communicator);
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(rank)] = e.what();
        group.abort("rank " + std::to_string(rank) + " failed: " + e.what());
      }
    });
  for (auto& thread : threads) thread.join();
  return errors;
}

inline bool all_succeeded(const std::vector<std::string>& errors, std::string* first_error = nullptr) {
  for (const auto& error : errors)
    if (!error.empty()) {
      if (first_error) *first_error = error;
      return false;
    }
  return true;
}

}  // namespace plexus::testing

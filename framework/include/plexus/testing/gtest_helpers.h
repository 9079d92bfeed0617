#pragma once
// GoogleTest glue for plexus/gradcheck.h and for error messages:
//   EXPECT_TRUE(plexus::testing::gradients_match(check_gradients(...)));
//   if (!plexus::cuda_available()) GTEST_SKIP() << plexus::testing::kNoGpuReason;
//   plexus::testing::expect_error<ConfigError>([&] { ... }, {"'node'", "what is wrong"});
//   EXPECT_EQ(plexus::testing::error_of<ConfigError>([&] { ... }), "the whole message");
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "plexus/gradcheck.h"

namespace plexus::testing {

inline constexpr const char* kNoGpuReason = "no CUDA GPU visible to this process (or Plexus built without CUDA); "
                                            "run this test on a machine with an NVIDIA GPU and a CUDA build";

inline ::testing::AssertionResult gradients_match(const GradCheckResult& result) {
  if (result.ok()) return ::testing::AssertionSuccess() << result.report();
  return ::testing::AssertionFailure() << result.report();
}

inline ::testing::AssertionResult outputs_match(const ParityResult& result) {
  if (result.ok()) return ::testing::AssertionSuccess() << result.report();
  return ::testing::AssertionFailure() << result.report();
}

// Expects `fn` to throw E (or a type derived from it) whose message contains
// every one of `parts`.
template <typename E, typename Fn>
void expect_error(Fn&& fn, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "expected an exception whose message contains \"" << (parts.empty() ? "" : parts.front()) << "\"";
  } catch (const E& e) {
    for (const std::string& part : parts)
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << "missing \"" << part << "\" in: " << e.what();
  }
}

// Runs `fn`, expects it to throw E (or a type derived from it) and returns
// the message; records a test failure and returns "" when nothing is thrown.
template <typename E, typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const E& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an exception";
  return "";
}

}  // namespace plexus::testing

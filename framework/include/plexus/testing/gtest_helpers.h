#pragma once
// GoogleTest glue for plexus/gradcheck.h:
//   EXPECT_TRUE(plexus::testing::gradients_match(check_gradients(...)));
//   if (!plexus::cuda_available()) GTEST_SKIP() << plexus::testing::kNoGpuReason;
#include <gtest/gtest.h>

#include "plexus/gradcheck.h"

namespace plexus::testing {

inline constexpr const char* kNoGpuReason =
    "no CUDA GPU visible to this process (or Plexus built without CUDA); "
    "run this test on a machine with an NVIDIA GPU and a CUDA build";

inline ::testing::AssertionResult gradients_match(const GradCheckResult& result) {
  if (result.ok()) return ::testing::AssertionSuccess() << result.report();
  return ::testing::AssertionFailure() << result.report();
}

inline ::testing::AssertionResult outputs_match(const ParityResult& result) {
  if (result.ok()) return ::testing::AssertionSuccess() << result.report();
  return ::testing::AssertionFailure() << result.report();
}

}  // namespace plexus::testing

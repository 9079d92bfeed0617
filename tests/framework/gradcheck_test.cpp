// The gradient checker itself: it must pass a correct layer and FAIL a layer
// whose backward is wrong (otherwise every layer test would prove nothing).
#include <gtest/gtest.h>

#include "framework/test_layers.h"
#include "plexus/gradcheck.h"
#include "plexus/testing/gtest_helpers.h"

namespace plexus {
namespace {

TEST(GradCheck, PassesACorrectLayer) {
  GradCheckResult result = check_gradients(test::test_registry(), "TestScale", {}, {{3, 4}});
  EXPECT_TRUE(result.ok()) << result.report();
  EXPECT_EQ(result.checked, 12 + 1);  // every input element and the parameter
}

TEST(GradCheck, FailsABrokenLayer) {
  GradCheckResult result = check_gradients(test::test_registry(), "TestBrokenSquare", {}, {{5}});
  EXPECT_FALSE(result.ok());
  EXPECT_EQ(result.failures, 5);
  ASSERT_FALSE(result.mismatches.empty());
  // The numeric gradient of sum(r * x^2) is 2 r x: twice the broken analytic one.
  EXPECT_NEAR(result.mismatches[0].numeric, 2.0 * result.mismatches[0].analytic, 1e-6);
  EXPECT_FALSE(testing::gradients_match(result));
}

TEST(GradCheck, SkipsKinks) {
  GradCheckOptions options;
  options.kink = 0.0;
  options.kink_range = 10.0;  // every input is within the band
  GradCheckResult result = check_gradients(test::test_registry(), "ReLU", {}, {{6}}, Device::cpu(), options);
  EXPECT_EQ(result.skipped, 6);
  EXPECT_FALSE(result.ok()) << "nothing checked must not count as a pass";
}

TEST(GradCheck, ChecksAtMostTheRequestedElementsPerTensor) {
  GradCheckOptions options;
  options.max_elements_per_tensor = 10;
  // 25 input elements: windows of 3, so 9 checked; the 1-element parameter: 1.
  GradCheckResult result = check_gradients(test::test_registry(), "TestScale", {}, {{5, 5}}, Device::cpu(), options);
  EXPECT_TRUE(result.ok()) << result.report();
  EXPECT_EQ(result.checked, 9 + 1);
  // Sampled elements still catch a broken backward.
  GradCheckResult broken =
      check_gradients(test::test_registry(), "TestBrokenSquare", {}, {{40}}, Device::cpu(), options);
  EXPECT_EQ(broken.checked, 10);
  EXPECT_EQ(broken.failures, 10);
}

TEST(GradCheck, InputsAreRandomAndNonZero) {
  GradCheckOptions options;
  std::vector<double> seen;
  options.input_filler = [&](int, std::vector<double>& values, std::mt19937_64&) { seen = values; };
  check_gradients(test::test_registry(), "ReLU", {}, {{64}}, Device::cpu(), options);
  ASSERT_EQ(seen.size(), 64u);
  for (double v : seen) EXPECT_GE(std::abs(v), 1e-2);
  EXPECT_NE(seen[0], seen[1]);
}

// The classic plugin bug: a parameter gradient assigned (=) instead of
// accumulated (+=). The forward and the formula are right, so only the
// pre-filled gradient exposes it.
TEST(GradCheck, FailsALayerThatAssignsItsParameterGradient) {
  GradCheckResult result = check_gradients(test::test_registry(), "TestScale", {{"bug", "assign"}}, {{3, 4}});
  EXPECT_FALSE(result.ok()) << result.report();
  EXPECT_EQ(result.failures, 1);  // the parameter; the input gradient is right
  ASSERT_EQ(result.mismatches.size(), 1u);
  EXPECT_EQ(result.mismatches[0].tensor, "parameter a");
  const std::string report = result.report();
  EXPECT_NE(report.find("assigned (=) the gradient instead of accumulating (+=)"), std::string::npos) << report;
}

TEST(GradCheck, ListsFailuresWorstFirstWithIndicesPerDimensionAndHintsAtSignErrors) {
  GradCheckResult result = check_gradients(test::test_registry(), "TestScale", {{"bug", "negate"}}, {{2, 3}});
  EXPECT_EQ(result.failures, 6);  // every input element; the parameter is right
  ASSERT_EQ(result.mismatches.size(), 6u);
  for (std::size_t i = 1; i < result.mismatches.size(); ++i)
    EXPECT_GE(result.mismatches[i - 1].error, result.mismatches[i].error);
  for (const auto& m : result.mismatches) {
    ASSERT_EQ(m.position.size(), 2u);
    EXPECT_EQ(m.position[0] * 3 + m.position[1], m.index);
    EXPECT_NEAR(m.analytic, -m.numeric, 1e-6);
  }
  const std::string report = result.report();
  EXPECT_NE(report.find("a sign error?"), std::string::npos) << report;
  EXPECT_NE(report.find("input 0 [" + std::to_string(result.mismatches[0].position[0]) + ", " +
                        std::to_string(result.mismatches[0].position[1]) + "]"),
            std::string::npos)
      << report;
}

TEST(GradCheck, BuffersAreHeldConstant) {
  // y = a s x with the buffer s: checking s would fail (the loss depends on
  // it, backward gives it nothing); it is skipped, so only x and a are checked.
  GradCheckResult result = check_gradients(test::test_registry(), "TestBufferedScale", {}, {{2, 3}});
  EXPECT_TRUE(testing::gradients_match(result));
  EXPECT_EQ(result.checked, 6 + 1);
}

}  // namespace
}  // namespace plexus

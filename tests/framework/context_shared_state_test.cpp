// Context::shared_state: one object per key and context, made on first use;
// the memory generation counts what note_memory_replaced reports.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "plexus/context.h"

namespace plexus {
namespace {

TEST(ContextSharedState, OneObjectPerKeyAndContext) {
  Context ctx, other;
  auto& numbers = ctx.shared_state<std::vector<int>>("numbers");
  EXPECT_TRUE(numbers.empty());
  numbers.push_back(7);
  EXPECT_EQ(&ctx.shared_state<std::vector<int>>("numbers"), &numbers);
  EXPECT_EQ(ctx.shared_state<std::vector<int>>("numbers"), (std::vector<int>{7}));
  EXPECT_NE(&ctx.shared_state<std::vector<int>>("other numbers"), &numbers);
  EXPECT_TRUE(other.shared_state<std::vector<int>>("numbers").empty());
  EXPECT_EQ(ctx.shared_state<std::string>("text"), "");
}

TEST(ContextSharedState, TheMemoryGenerationCountsReplacements) {
  Context ctx;
  EXPECT_EQ(ctx.memory_generation(), 0u);
  ctx.note_memory_replaced();
  ctx.note_memory_replaced();
  EXPECT_EQ(ctx.memory_generation(), 2u);
}

}  // namespace
}  // namespace plexus

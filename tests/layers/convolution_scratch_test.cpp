// grown_scratch (convolution/scratch.h), the buffers every convolution of a
// context shares: grown when a caller needs more elements (or another
// dtype), never shrunk, a view of the caller's shape at the start, and every
// growth noted on the context (StepGraph records again after one).
#include <gtest/gtest.h>

#include "convolution/scratch.h"

namespace plexus::layers {
namespace {

TEST(GrownScratch, GrowsNeverShrinksAndNotesEachGrowth) {
  Context ctx;
  Tensor buffer;
  Tensor first = grown_scratch(ctx, buffer, {2, 3}, DType::f32);
  EXPECT_EQ(first.shape(), (Shape{2, 3}));
  EXPECT_EQ(buffer.numel(), 6);
  EXPECT_EQ(ctx.memory_generation(), 1u);
  const void* memory = buffer.raw_data();

  Tensor smaller = grown_scratch(ctx, buffer, {4}, DType::f32);  // fits: same memory, no growth
  EXPECT_EQ(smaller.shape(), (Shape{4}));
  EXPECT_EQ(smaller.raw_data(), memory);
  EXPECT_EQ(buffer.numel(), 6);
  EXPECT_EQ(ctx.memory_generation(), 1u);

  Tensor larger = grown_scratch(ctx, buffer, {3, 3}, DType::f32);
  EXPECT_EQ(larger.shape(), (Shape{3, 3}));
  EXPECT_EQ(buffer.numel(), 9);
  EXPECT_EQ(larger.raw_data(), buffer.raw_data());
  EXPECT_EQ(ctx.memory_generation(), 2u);

  Tensor wide = grown_scratch(ctx, buffer, {2}, DType::f64);  // another dtype: replaced
  EXPECT_EQ(wide.dtype(), DType::f64);
  EXPECT_EQ(buffer.dtype(), DType::f64);
  EXPECT_EQ(ctx.memory_generation(), 3u);

  // Writes through a view land in the buffer the next caller sees.
  wide.data<double>()[1] = 2.5;
  EXPECT_EQ(grown_scratch(ctx, buffer, {2}, DType::f64).to_values(), (std::vector<double>{0, 2.5}));
}

}  // namespace
}  // namespace plexus::layers

// The data-parallel share of each batch: N ranks with batch B together see
// exactly the crops one sampler with batch N * B draws, each crop once.
#include <gtest/gtest.h>

#include <cstring>

#include "plexus/data/image_folder.h"
#include "plexus/data/patch_sampler.h"

namespace plexus::data {
namespace {

bool same_plan(const PatchPlan& a, const PatchPlan& b) {
  return a.image == b.image && a.x_draw == b.x_draw && a.y_draw == b.y_draw && a.flip_horizontal == b.flip_horizontal &&
         a.flip_vertical == b.flip_vertical;
}

TEST(ShardedSampler, RanksSplitTheGlobalBatchInOrderWithoutOverlap) {
  const int per_rank = 3;
  for (int world : {1, 2, 3, 4}) {
    const PatchSampler single(17, per_rank * world, 32);
    for (std::int64_t step : {0, 1, 57, 123456}) {
      const std::vector<PatchPlan> global = single.plan(step, 1000);
      ASSERT_EQ(global.size(), static_cast<std::size_t>(per_rank * world));
      for (int rank = 0; rank < world; ++rank) {
        const PatchSampler shard(17, per_rank, 32, {rank, world});
        const std::vector<PatchPlan> mine = shard.plan(step, 1000);
        ASSERT_EQ(mine.size(), static_cast<std::size_t>(per_rank));
        for (int k = 0; k < per_rank; ++k)
          EXPECT_TRUE(same_plan(mine[k], global[rank * per_rank + k]))
              << "world " << world << ", rank " << rank << ", crop " << k << ", step " << step;
      }
    }
  }
}

TEST(ShardedSampler, ShardsOfADifferentStepOrSeedDiffer) {
  const PatchSampler rank1(17, 4, 32, {1, 2});
  const auto a = rank1.plan(5, 1000), b = rank1.plan(6, 1000);
  const auto c = PatchSampler(18, 4, 32, {1, 2}).plan(5, 1000);
  int equal_steps = 0, equal_seeds = 0;
  for (int k = 0; k < 4; ++k) {
    equal_steps += same_plan(a[k], b[k]);
    equal_seeds += same_plan(a[k], c[k]);
  }
  EXPECT_EQ(equal_steps, 0);
  EXPECT_EQ(equal_seeds, 0);
}

// The pixels: the ranks' batches, concatenated in rank order, are the
// single sampler's batch bit for bit.
TEST(ShardedSampler, ConcatenatedRankBatchesEqualTheSingleBatchExactly) {
  ImageFolder images(std::string(PLEXUS_SOURCE_DIR) + "/data/train-sample");
  ASSERT_GT(images.size(), 0u);
  const int world = 3, per_rank = 2, patch = 24;
  for (std::int64_t step : {0, 9}) {
    const Tensor single = PatchSampler(5, world * per_rank, patch).make_batch(images, step);
    const std::size_t rank_bytes = single.nbytes() / world;
    for (int rank = 0; rank < world; ++rank) {
      const Tensor mine = PatchSampler(5, per_rank, patch, {rank, world}).make_batch(images, step);
      ASSERT_EQ(mine.shape(), (Shape{per_rank, 3, patch, patch}));
      EXPECT_EQ(
          std::memcmp(mine.raw_data(), static_cast<const char*>(single.raw_data()) + rank * rank_bytes, rank_bytes), 0)
          << "rank " << rank << " of " << world << ", step " << step;
    }
  }
}

TEST(ShardedSampler, RejectsARankOutsideTheWorld) {
  for (Shard shard : {Shard{2, 2}, Shard{-1, 2}, Shard{0, 0}}) {
    try {
      PatchSampler(1, 4, 32, shard);
      FAIL() << "rank " << shard.rank << " of " << shard.world_size << " was accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("rank " + std::to_string(shard.rank)), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace plexus::data

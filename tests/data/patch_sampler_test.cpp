// PatchSampler: crop size and value range, crops that are true windows of
// the image, flips, reflection of small images, and reproducibility by seed.
#include <gtest/gtest.h>

#include <set>

#include "data/data_test_support.h"
#include "plexus/data/patch_sampler.h"

namespace plexus {
namespace {

using data::Image;
using data::ImageFolder;
using data::PatchPlan;
using data::PatchSampler;
using testing::ScratchFolder;

// The (x, y) source position encoded in pixel (px, py) of patch `item`.
struct Source {
  int x, y;
};
Source source_of(const Tensor& batch, int item, int py, int px) {
  const int p = static_cast<int>(batch.dim(3));
  const float* data = batch.data<float>() + static_cast<std::size_t>(item) * 3 * p * p;
  const std::size_t at = static_cast<std::size_t>(py) * p + px;
  return {static_cast<int>(std::lround(data[at] * 255.0f)),
          static_cast<int>(std::lround(data[static_cast<std::size_t>(p) * p + at] * 255.0f))};
}

TEST(PatchSampler, ReflectIndexFollowsTheMirrorPattern) {
  // length 3: 0 1 2 | 2 1 0 | 0 1 2 | 2 ...
  const std::vector<int> expected = {0, 1, 2, 2, 1, 0, 0, 1, 2, 2};
  for (int i = 0; i < 10; ++i) EXPECT_EQ(data::reflect_index(i, 3), expected[i]) << "i = " << i;
  for (int i = 0; i < 5; ++i) EXPECT_EQ(data::reflect_index(i, 1), 0);
}

TEST(PatchSampler, PatchOriginStaysInsideTheFreeRange) {
  EXPECT_EQ(data::patch_origin(7, 10, 4), 0);  // 7 % 7
  EXPECT_EQ(data::patch_origin(8, 10, 4), 1);
  EXPECT_EQ(data::patch_origin(123456789, 10, 10), 0);
  EXPECT_EQ(data::patch_origin(5, 3, 8), 0);  // smaller than the patch
}

TEST(PatchSampler, BatchHasTheRequestedShapeAndValuesInUnitRange) {
  ScratchFolder folder("crops");
  data::write_png(folder / "a.png", testing::position_image(40, 30));
  data::write_png(folder / "b.png", testing::position_image(33, 50));
  ImageFolder images(folder.path());
  PatchSampler sampler(/*seed=*/7, /*batch=*/5, /*patch=*/16);
  Tensor batch = sampler.make_batch(images, 0);
  ASSERT_EQ(batch.shape(), (Shape{5, 3, 16, 16}));
  EXPECT_EQ(batch.dtype(), DType::f32);
  for (double v : batch.to_values()) {
    ASSERT_GE(v, 0.0);
    ASSERT_LE(v, 1.0);
  }
}

TEST(PatchSampler, EachCropIsAWindowOfItsImageFlippedAsPlanned) {
  ScratchFolder folder("windows");
  data::write_png(folder / "a.png", testing::position_image(40, 30));
  ImageFolder images(folder.path());
  const int patch = 12;
  PatchSampler sampler(3, 8, patch);
  for (std::int64_t step = 0; step < 5; ++step) {
    const auto plans = sampler.plan(step, images.size());
    Tensor batch = sampler.make_batch(images, step);
    for (int item = 0; item < 8; ++item) {
      const PatchPlan& plan = plans[item];
      const int x0 = data::patch_origin(plan.x_draw, 40, patch);
      const int y0 = data::patch_origin(plan.y_draw, 30, patch);
      ASSERT_LE(x0 + patch, 40);
      ASSERT_LE(y0 + patch, 30);
      for (int py = 0; py < patch; ++py)
        for (int px = 0; px < patch; ++px) {
          Source s = source_of(batch, item, py, px);
          ASSERT_EQ(s.x, x0 + (plan.flip_horizontal ? patch - 1 - px : px));
          ASSERT_EQ(s.y, y0 + (plan.flip_vertical ? patch - 1 - py : py));
        }
    }
  }
}

TEST(PatchSampler, FlipsAndPositionsVaryAndAreReproducibleBySeed) {
  PatchSampler sampler(42, 4, 8);
  PatchSampler same(42, 4, 8);
  PatchSampler other(43, 4, 8);
  int horizontal = 0, vertical = 0, total = 0;
  std::set<std::uint64_t> draws;
  for (std::int64_t step = 0; step < 100; ++step) {
    auto plans = sampler.plan(step, 10);
    auto again = same.plan(step, 10);
    auto different = other.plan(step, 10);
    for (std::size_t i = 0; i < plans.size(); ++i) {
      EXPECT_EQ(plans[i].image, again[i].image);
      EXPECT_EQ(plans[i].x_draw, again[i].x_draw);
      EXPECT_EQ(plans[i].y_draw, again[i].y_draw);
      EXPECT_EQ(plans[i].flip_horizontal, again[i].flip_horizontal);
      EXPECT_EQ(plans[i].flip_vertical, again[i].flip_vertical);
      EXPECT_NE(plans[i].x_draw, different[i].x_draw);
      horizontal += plans[i].flip_horizontal;
      vertical += plans[i].flip_vertical;
      draws.insert(plans[i].x_draw);
      ++total;
    }
  }
  // 400 fair coin flips: outside [150, 250] has probability < 1e-6.
  EXPECT_GT(horizontal, 150);
  EXPECT_LT(horizontal, 250);
  EXPECT_GT(vertical, 150);
  EXPECT_LT(vertical, 250);
  EXPECT_EQ(draws.size(), static_cast<std::size_t>(total));
}

TEST(PatchSampler, SameSeedAndStepGiveIdenticalBatches) {
  ScratchFolder folder("repro");
  data::write_png(folder / "a.png", testing::position_image(50, 40));
  data::write_png(folder / "b.png", testing::position_image(45, 60));
  ImageFolder images(folder.path());
  PatchSampler sampler(11, 4, 16);
  EXPECT_EQ(sampler.make_batch(images, 5).to_values(), PatchSampler(11, 4, 16).make_batch(images, 5).to_values());
  EXPECT_NE(sampler.make_batch(images, 5).to_values(), sampler.make_batch(images, 6).to_values());
  EXPECT_NE(sampler.make_batch(images, 5).to_values(), PatchSampler(12, 4, 16).make_batch(images, 5).to_values());
}

TEST(PatchSampler, ImageSmallerThanThePatchIsExtendedByReflection) {
  ScratchFolder folder("small");
  data::write_png(folder / "tiny.png", testing::position_image(3, 2));
  ImageFolder images(folder.path());
  const int patch = 7;
  PatchSampler sampler(1, 6, patch);
  const auto plans = sampler.plan(0, 1);
  Tensor batch = sampler.make_batch(images, 0);
  // Along x (length 3): 0 1 2 2 1 0 0; along y (length 2): 0 1 1 0 0 1 1.
  const std::vector<int> along_x = {0, 1, 2, 2, 1, 0, 0};
  const std::vector<int> along_y = {0, 1, 1, 0, 0, 1, 1};
  for (int item = 0; item < 6; ++item)
    for (int py = 0; py < patch; ++py)
      for (int px = 0; px < patch; ++px) {
        const int qx = plans[item].flip_horizontal ? patch - 1 - px : px;
        const int qy = plans[item].flip_vertical ? patch - 1 - py : py;
        Source s = source_of(batch, item, py, px);
        ASSERT_EQ(s.x, along_x[qx]) << "item " << item << " px " << px;
        ASSERT_EQ(s.y, along_y[qy]) << "item " << item << " py " << py;
      }
}

TEST(PatchSampler, ByteBatchHoldsEveryChannelOfItsSourcePixelAndMakeBatchIsItOver255) {
  ScratchFolder folder("bytes");
  data::write_png(folder / "a.png", testing::position_image(37, 23));
  data::write_png(folder / "b.png", testing::position_image(9, 14));  // smaller than the patch: reflected
  ImageFolder images(folder.path());
  const int patch = 16, count = 6;
  PatchSampler sampler(7, count, patch);
  ASSERT_EQ(sampler.batch_elements(), static_cast<std::size_t>(count) * 3 * patch * patch);
  for (std::int64_t step = 0; step < 4; ++step) {
    std::vector<std::uint8_t> bytes(sampler.batch_elements());
    sampler.fill_batch(images, step, bytes.data());
    const auto plans = sampler.plan(step, images.size());
    for (int item = 0; item < count; ++item) {
      const Image& image = *images.load(plans[item].image);
      const int x0 = data::patch_origin(plans[item].x_draw, image.width, patch);
      const int y0 = data::patch_origin(plans[item].y_draw, image.height, patch);
      for (int c = 0; c < 3; ++c)
        for (int py = 0; py < patch; ++py)
          for (int px = 0; px < patch; ++px) {
            const int qx = plans[item].flip_horizontal ? patch - 1 - px : px;
            const int qy = plans[item].flip_vertical ? patch - 1 - py : py;
            const std::uint8_t expected =
                image.at(data::reflect_index(y0 + qy, image.height), data::reflect_index(x0 + qx, image.width), c);
            const std::size_t at = ((static_cast<std::size_t>(item) * 3 + c) * patch + py) * patch + px;
            ASSERT_EQ(bytes[at], expected) << "step " << step << " item " << item << " c " << c;
          }
    }
    const std::vector<double> values = sampler.make_batch(images, step).to_values();
    for (std::size_t i = 0; i < bytes.size(); ++i)
      ASSERT_EQ(static_cast<float>(values[i]), static_cast<float>(bytes[i]) / 255.0f) << i;
  }
}

TEST(PatchSampler, BytesToUnitDividesBy255) {
  const std::vector<std::uint8_t> bytes = {0, 51, 102, 255};
  std::vector<float> values(bytes.size());
  data::bytes_to_unit(bytes.data(), values.data(), bytes.size());
  EXPECT_EQ(values, (std::vector<float>{0.0f, 0.2f, 0.4f, 1.0f}));
}

TEST(PatchSampler, RejectsBadSizes) {
  EXPECT_THROW(PatchSampler(0, 0, 8), ConfigError);
  EXPECT_THROW(PatchSampler(0, 2, 0), ConfigError);
}

}  // namespace
}  // namespace plexus

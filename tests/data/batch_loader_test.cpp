// BatchLoader: background batches equal the synchronous ones, come in step
// order from any starting step, and carry worker errors to the caller.
#include <gtest/gtest.h>

#include "data/data_test_support.h"
#include "plexus/data/batch_loader.h"

namespace plexus {
namespace {

using data::BatchLoader;
using data::ImageFolder;
using data::PatchSampler;
using testing::ScratchFolder;

class BatchLoaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    data::write_png(folder / "a.png", testing::position_image(30, 20));
    data::write_png(folder / "b.png", testing::position_image(25, 35));
    data::write_png(folder / "c.png", testing::position_image(10, 12));
  }
  ScratchFolder folder{"loader"};
};

TEST_F(BatchLoaderTest, BackgroundThreadsGiveTheSynchronousBatchesInOrder) {
  ImageFolder images(folder.path());
  PatchSampler sampler(5, 3, 8);
  BatchLoader threaded(images, sampler, /*first_step=*/0, /*threads=*/3, /*prefetch=*/2);
  BatchLoader inline_loader(images, sampler, 0, /*threads=*/0);
  for (std::int64_t step = 0; step < 20; ++step) {
    EXPECT_EQ(threaded.next_step(), step);
    Tensor expected = sampler.make_batch(images, step);
    EXPECT_EQ(threaded.next().to_values(), expected.to_values()) << "step " << step;
    EXPECT_EQ(inline_loader.next().to_values(), expected.to_values()) << "step " << step;
  }
}

TEST_F(BatchLoaderTest, StartingLaterContinuesTheSameSequence) {
  ImageFolder images(folder.path());
  PatchSampler sampler(9, 2, 8);
  BatchLoader from_start(images, sampler, 0, 2);
  for (int i = 0; i < 7; ++i) from_start.next();
  BatchLoader resumed(images, sampler, 7, 2);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(from_start.next().to_values(), resumed.next().to_values());
}

TEST_F(BatchLoaderTest, DestroyingWithBatchesPendingDoesNotHang) {
  ImageFolder images(folder.path());
  BatchLoader loader(images, PatchSampler(1, 2, 8), 0, 4, 8);
  loader.next();
}

TEST_F(BatchLoaderTest, LeasesHoldTheSamplersBytesInPlace) {
  ImageFolder images(folder.path());
  PatchSampler sampler(4, 2, 8);
  for (int threads : {0, 2}) {
    BatchLoader loader(images, sampler, /*first_step=*/3, threads, /*prefetch=*/2);
    EXPECT_EQ(loader.batch_shape(), (Shape{2, 3, 8, 8}));
    for (std::int64_t step = 3; step < 12; ++step) {
      BatchLoader::Lease lease = loader.next_lease();
      ASSERT_TRUE(lease.held());
      EXPECT_EQ(lease.step(), step);
      std::vector<std::uint8_t> expected(sampler.batch_elements());
      sampler.fill_batch(images, step, expected.data());
      ASSERT_EQ(lease.size(), expected.size());
      EXPECT_EQ(std::vector<std::uint8_t>(lease.bytes(), lease.bytes() + lease.size()), expected)
          << threads << " threads, step " << step;
    }
  }
}

TEST_F(BatchLoaderTest, HoldingEveryBufferIsAnErrorNotAHangAndReleasingOneContinues) {
  ImageFolder images(folder.path());
  PatchSampler sampler(4, 2, 8);
  for (int threads : {0, 3}) {
    BatchLoader loader(images, sampler, 0, threads, /*prefetch=*/2);
    BatchLoader::Lease first = loader.next_lease();
    BatchLoader::Lease second = loader.next_lease();
    EXPECT_THROW(loader.next_lease(), Error) << threads << " threads";
    const std::vector<std::uint8_t> second_bytes(second.bytes(), second.bytes() + second.size());
    first.release();
    EXPECT_FALSE(first.held());
    BatchLoader::Lease third = loader.next_lease();  // into the buffer the first one held
    EXPECT_EQ(third.step(), 2);
    EXPECT_EQ(third.bytes(), first.bytes());
    // The batch still leased is untouched by the one built next to it.
    EXPECT_EQ(std::vector<std::uint8_t>(second.bytes(), second.bytes() + second.size()), second_bytes);
    std::vector<std::uint8_t> expected(sampler.batch_elements());
    sampler.fill_batch(images, 2, expected.data());
    EXPECT_EQ(std::vector<std::uint8_t>(third.bytes(), third.bytes() + third.size()), expected);
  }
}

TEST(BatchLoader, WorkerErrorReachesTheCaller) {
  ScratchFolder folder("loader-error");
  data::write_png(folder / "a.png", testing::position_image(64, 64));
  std::string bytes = testing::read_bytes(folder / "a.png");
  testing::write_bytes(folder / "a.png", bytes.substr(0, bytes.size() / 2));
  testing::LogCapture log;
  ImageFolder images(folder.path());
  BatchLoader loader(images, PatchSampler(1, 2, 8), 0, 2);
  EXPECT_THROW(loader.next(), IoError);
}

TEST(BatchLoader, RejectsBadSettings) {
  ScratchFolder folder("loader-bad");
  data::write_png(folder / "a.png", testing::position_image(8, 8));
  ImageFolder images(folder.path());
  EXPECT_THROW(BatchLoader(images, PatchSampler(1, 2, 8), 0, -1), ConfigError);
  EXPECT_THROW(BatchLoader(images, PatchSampler(1, 2, 8), 0, 1, 0), ConfigError);
}

}  // namespace
}  // namespace plexus

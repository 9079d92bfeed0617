// DeviceInput: the batches it delivers (on the CPU, and on CUDA as bytes
// from pinned buffers, copied and converted on the device) are the loader's,
// in step order.
#include <gtest/gtest.h>

#include "data/data_test_support.h"
#include "plexus/data/device_input.h"
#include "plexus/testing/gtest_helpers.h"

namespace plexus {
namespace {

using data::BatchLoader;
using data::DeviceInput;
using data::ImageFolder;
using data::PatchSampler;
using testing::ScratchFolder;

class DeviceInputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    data::write_png(folder / "a.png", testing::position_image(30, 20));
    data::write_png(folder / "b.png", testing::position_image(25, 35));
  }
  // Steps first_step.. of `device`'s DeviceInput against the sampler's own batches.
  void expect_loader_batches(Device device, int depth, std::int64_t first_step) {
    ImageFolder images(folder.path());
    PatchSampler sampler(9, 3, 8);
    // Buffers for `device`, as plexus-ae train makes them: page-locked on CUDA.
    BatchLoader loader(images, sampler, first_step, /*threads=*/2, /*prefetch=*/3, device);
    const Shape shape{3, 3, 8, 8};
    DeviceInput input(loader, device, shape, depth);
    Context ctx(device);
    Tensor destination(shape, DType::f32, device);
    for (std::int64_t step = first_step; step < first_step + 7; ++step) {
      input.next_into(ctx, destination);
      EXPECT_EQ(destination.to_values(), sampler.make_batch(images, step).to_values())
          << device.str() << " depth " << depth << " step " << step;
    }
  }
  ScratchFolder folder{"device-input"};
};

TEST_F(DeviceInputTest, CpuDeliversTheLoaderBatches) { expect_loader_batches(Device::cpu(), 2, 4); }

TEST_F(DeviceInputTest, CudaDeliversTheLoaderBatches) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  expect_loader_batches(Device::cuda(), 2, 0);
  expect_loader_batches(Device::cuda(), 3, 5);
}

TEST_F(DeviceInputTest, RejectsBadDepthAndShapes) {
  ImageFolder images(folder.path());
  BatchLoader loader(images, PatchSampler(1, 3, 8), 0, 0);
  EXPECT_THROW(DeviceInput(loader, Device::cpu(), {3, 3, 8, 8}, 1), ConfigError);
  Context ctx;
  DeviceInput wrong(loader, Device::cpu(), {3, 3, 4, 4});
  Tensor destination({3, 3, 4, 4});
  EXPECT_THROW(wrong.next_into(ctx, destination), ShapeError);  // the loader's batches are 8x8
  DeviceInput right(loader, Device::cpu(), {3, 3, 8, 8});
  Tensor too_small({3, 3, 4, 4});
  EXPECT_THROW(right.next_into(ctx, too_small), ShapeError);
}

}  // namespace
}  // namespace plexus

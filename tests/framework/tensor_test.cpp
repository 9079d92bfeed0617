// Tensor basics: shapes, dtype conversion, copies, errors.
#include <gtest/gtest.h>

#include "plexus/context.h"
#include "plexus/tensor.h"
#include "plexus/tensor_ops.h"
#include "plexus/testing/gtest_helpers.h"

namespace plexus {
namespace {

TEST(Tensor, ZeroFilledWithShape) {
  Tensor t({2, 3, 4}, DType::f64);
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.dim(-1), 4);
  EXPECT_EQ(t.nbytes(), 24u * 8u);
  for (double v : t.to_values()) EXPECT_EQ(v, 0.0);
  EXPECT_EQ(t.describe(), "f64[2, 3, 4] on cpu");
}

TEST(Tensor, ScalarHasOneElement) {
  Tensor s(Shape{}, DType::f32);
  EXPECT_EQ(s.numel(), 1);
}

TEST(Tensor, ConvertsDtypeAndSharesOnCopy) {
  Tensor a = Tensor::from_values({1.5, -2.25}, {2}, DType::f64);
  Tensor b = a.to(DType::f32);
  EXPECT_EQ(b.dtype(), DType::f32);
  EXPECT_EQ(b.to_values(), (std::vector<double>{1.5, -2.25}));
  Tensor shared = a;
  shared.data<double>()[0] = 9.0;
  EXPECT_EQ(a.to_values()[0], 9.0);
  Tensor deep = a.clone();
  deep.data<double>()[0] = 1.0;
  EXPECT_EQ(a.to_values()[0], 9.0);
}

TEST(Tensor, WrongTypedAccessThrows) {
  Tensor t({2}, DType::f32);
  EXPECT_THROW(t.data<double>(), Error);
}

TEST(Tensor, ReshapeChecksCount) {
  Tensor t({2, 6});
  EXPECT_EQ(t.reshaped({3, 4}).shape(), (Shape{3, 4}));
  EXPECT_THROW(t.reshaped({5}), ShapeError);
  EXPECT_THROW(t.copy_from(Tensor({12})), ShapeError);
}

// A view sees elements [first, first + count) of the tensor it was taken
// from, shares writes both ways, composes with reshaped() and with another
// view, and keeps the storage alive after the original is gone.
TEST(Tensor, ElementsViewSharesASliceOfTheStorage) {
  Tensor view;
  {
    Tensor t = Tensor::from_values({0, 1, 2, 3, 4, 5, 6, 7}, {8}, DType::f64);
    view = t.elements_view(2, {2, 2});
    EXPECT_EQ(view.shape(), (Shape{2, 2}));
    EXPECT_EQ(view.to_values(), (std::vector<double>{2, 3, 4, 5}));
    view.copy_from(Tensor::from_values({20, 30, 40, 50}, {2, 2}, DType::f64));
    EXPECT_EQ(t.to_values(), (std::vector<double>{0, 1, 20, 30, 40, 50, 6, 7}));
    t.data<double>()[5] = -5;
    EXPECT_EQ(view.to_values(), (std::vector<double>{20, 30, 40, -5}));
    EXPECT_EQ(view.reshaped({4}).to_values(), (std::vector<double>{20, 30, 40, -5}));
    EXPECT_EQ(view.elements_view(1, {2}).to_values(), (std::vector<double>{30, 40}));
    EXPECT_EQ(t.elements_view(8, {0}).numel(), 0);
    EXPECT_EQ(view.clone().to_values(), (std::vector<double>{20, 30, 40, -5}));
  }
  EXPECT_EQ(view.to_values(), (std::vector<double>{20, 30, 40, -5}));
}

TEST(Tensor, ElementsViewOutsideTheTensorIsAShapeError) {
  Tensor t({8});
  EXPECT_THROW(t.elements_view(-1, {2}), ShapeError);
  EXPECT_THROW(t.elements_view(5, {4}), ShapeError);
  EXPECT_THROW(t.elements_view(9, {0}), ShapeError);
  EXPECT_THROW(t.elements_view(0, {-1}), ShapeError);
  EXPECT_THROW(t.elements_view(2, {2}).elements_view(1, {2}), ShapeError);  // within t, not within the view
  EXPECT_THROW(Tensor().elements_view(0, {0}), ShapeError);
}

TEST(TensorOps, FillAddAndFiniteness) {
  Context ctx;
  Tensor a({3}, DType::f64), b = Tensor::from_values({1, 2, 3}, {3}, DType::f64);
  fill(ctx, a, 0.5);
  add_into(ctx, a, b);
  EXPECT_EQ(a.to_values(), (std::vector<double>{1.5, 2.5, 3.5}));
  EXPECT_TRUE(all_finite(ctx, a));
  a.data<double>()[1] = std::nan("");
  EXPECT_FALSE(all_finite(ctx, a));
}

TEST(TensorOps, SetValuesWritesEachElement) {
  Context ctx;
  for (DType dtype : {DType::f32, DType::f64}) {
    Tensor t({3}, dtype);
    set_values(ctx, t, {0.25, -2.0, 5.5});
    EXPECT_EQ(t.to_values(), (std::vector<double>{0.25, -2.0, 5.5}));
  }
  Tensor t({3}, DType::f32);
  EXPECT_THROW(set_values(ctx, t, {1.0, 2.0}), ShapeError);  // one value too few
  Tensor large({static_cast<std::int64_t>(kMaxSetValues) + 1}, DType::f32);
  EXPECT_THROW(set_values(ctx, large, std::vector<double>(kMaxSetValues + 1, 1.0)), ShapeError);
}

// On CUDA the values travel as a kernel argument, ordered on the context's stream.
TEST(TensorOps, SetValuesOnCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  Context ctx(Device::cuda());
  std::vector<double> values(kMaxSetValues);
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = 0.5 * static_cast<double>(i) - 7;
  for (DType dtype : {DType::f32, DType::f64}) {
    Tensor t({static_cast<std::int64_t>(values.size())}, dtype, Device::cuda());
    set_values(ctx, t, values);
    EXPECT_EQ(t.to(Device::cpu()).to_values(), values);
  }
}

// fill_zero of many tensors: bf16 views of one storage at odd element
// offsets (so 2-byte but not 16-byte aligned), of lengths from 0 to past
// 16-byte words and blocks, with gaps between them, and more tensors than
// one CUDA launch takes (64). Every viewed element becomes 0; every gap
// element keeps its value.
void expect_fill_zero_of_views_zeroes_them_only(Device device) {
  const std::vector<std::int64_t> lengths = {0, 1, 7, 8, 9, 15, 16, 17, 100, 4099, 70001};
  std::vector<std::pair<std::int64_t, std::int64_t>> views;  // (first, length)
  std::int64_t next = 3;
  for (int round = 0; round < 8; ++round)
    for (std::size_t k = 0; k < lengths.size(); ++k) {
      const std::int64_t length = round == 0 || lengths[k] < 1000 ? lengths[k] : 5;
      views.push_back({next, length});
      next += length + 1 + static_cast<std::int64_t>((k + static_cast<std::size_t>(round)) % 5);
    }
  ASSERT_GT(views.size(), 64u);
  std::vector<double> values(static_cast<std::size_t>(next + 2));
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<double>(i % 200 + 1);
  Tensor storage = Tensor::from_values(values, {static_cast<std::int64_t>(values.size())}, DType::bf16, device);
  std::vector<Tensor> tensors;
  for (const auto& [first, length] : views) tensors.push_back(storage.elements_view(first, {length}));
  std::vector<Tensor*> pointers;
  for (Tensor& t : tensors) pointers.push_back(&t);
  fill_zero(pointers);
  std::vector<double> expected = values;
  for (const auto& [first, length] : views)
    for (std::int64_t i = first; i < first + length; ++i) expected[static_cast<std::size_t>(i)] = 0;
  const std::vector<double> got = storage.to(Device::cpu()).to_values();
  ASSERT_EQ(got.size(), expected.size());
  for (std::size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], expected[i]) << "element " << i;
}

TEST(Tensor, FillZeroOfManyTensorsRefusesANullOneAndZeroesNothing) {
  Tensor kept = Tensor::from_values({1, 2}, {2}, DType::f32);
  try {
    fill_zero({&kept, nullptr});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "fill_zero: tensor 1 of 2 is null");
  }
  EXPECT_EQ(kept.to_values(), (std::vector<double>{1, 2}));
}

TEST(Tensor, FillZeroOfManyTensorsZeroesTheirElementsOnly) {
  expect_fill_zero_of_views_zeroes_them_only(Device::cpu());
}

TEST(Tensor, FillZeroOfManyTensorsZeroesTheirElementsOnlyCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  expect_fill_zero_of_views_zeroes_them_only(Device::cuda());
}

// Tensors on the CPU and on CUDA in one call: each zeroed on its own device.
TEST(Tensor, FillZeroOfTensorsOnTwoDevicesCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  Tensor on_cpu = Tensor::from_values({1, 2, 3}, {3}, DType::f32);
  Tensor on_gpu = Tensor::from_values({4, 5, 6, 7}, {4}, DType::f64, Device::cuda());
  fill_zero({&on_gpu, &on_cpu});
  EXPECT_EQ(on_cpu.to_values(), std::vector<double>(3, 0.0));
  EXPECT_EQ(on_gpu.to(Device::cpu()).to_values(), std::vector<double>(4, 0.0));
}

TEST(Device, ParsesNames) {
  EXPECT_TRUE(parse_device("cpu").is_cpu());
  EXPECT_THROW(parse_device("gpu"), ConfigError);
}

}  // namespace
}  // namespace plexus

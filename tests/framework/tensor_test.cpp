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

TEST(Device, ParsesNames) {
  EXPECT_TRUE(parse_device("cpu").is_cpu());
  EXPECT_THROW(parse_device("gpu"), ConfigError);
}

}  // namespace
}  // namespace plexus

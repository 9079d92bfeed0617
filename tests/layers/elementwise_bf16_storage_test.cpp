// The element-wise layers (ReLU, LeakyReLU, Abs, Tanh, Sigmoid, GELU, Add,
// Mul, PixelShuffle) with bf16 activation storage (LayerTraits::stores_bf16): storing
// in bf16 changes nothing but the rounding of the stored tensors. With
// inputs and output gradients whose values are bf16 numbers, a pass on CUDA
// with each tensor f32 or bf16 must give exactly the f32 pass's output and
// input gradients, rounded to bf16 (nearest even) where they are stored in
// bf16. None of these layers has parameters, so there are no parameter
// gradients to compare. Tanh and Sigmoid compute their backward from y: both
// backward passes are given the y the stored forward wrote. Sizes are odd
// (2x3x5x7) so no tail of the grid is left out. On the CPU a bf16 tensor is
// refused by name.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "layers/bf16_storage_test_support.h"
#include "plexus/builtin_layers.h"
#include "plexus/error.h"
#include "plexus/testing/gtest_helpers.h"

namespace plexus {
namespace {

using testing::bf16_values;
using testing::expect_stored;

const Registry registry = builtin_registry();

// A layer type, its params and its input shapes.
struct LayerCase {
  std::string type;
  nlohmann::json params;
  std::vector<Shape> input_shapes;
};

const Shape kOddShape{2, 3, 5, 7};

std::vector<LayerCase> one_input_layers() {
  return {{"ReLU", nlohmann::json::object(), {kOddShape}},
          {"LeakyReLU", {{"negative_slope", 0.2}}, {kOddShape}},
          {"Abs", nlohmann::json::object(), {kOddShape}},
          {"Tanh", {{"scale", 0.5}}, {kOddShape}},
          {"Sigmoid", nlohmann::json::object(), {kOddShape}},
          {"GELU", nlohmann::json::object(), {kOddShape}},
          {"GELU", {{"approximate", "tanh"}}, {kOddShape}},
          {"PixelShuffle", {{"upscale_factor", 2}}, {Shape{2, 12, 5, 7}}}};
}

// Where each tensor of a pass is stored: input k and its gradient in inputs[k], y and dy in output.
struct Storage {
  std::vector<DType> inputs;
  DType output;
};

Storage all_f32(std::size_t input_count) { return {std::vector<DType>(input_count, DType::f32), DType::f32}; }

std::string storage_str(const Storage& storage) {
  std::string text = "x";
  for (DType dtype : storage.inputs) text += std::string(" ") + dtype_name(dtype);
  return text + ", y " + dtype_name(storage.output);
}

std::unique_ptr<Layer> created(const LayerCase& layer_case) {
  auto layer = registry.create(layer_case.type, "e", layer_case.params);
  layer->output_shapes(layer_case.input_shapes);
  layer->create_parameters(layer_case.input_shapes);
  EXPECT_TRUE(layer->parameters().empty()) << layer_case.type << " has parameters: compare their gradients too";
  return layer;
}

std::vector<Tensor> tensors_of(const std::vector<std::vector<double>>& values, const std::vector<Shape>& shapes,
                               const std::vector<DType>& dtypes) {
  std::vector<Tensor> tensors;
  for (std::size_t k = 0; k < values.size(); ++k)
    tensors.push_back(Tensor::from_values(values[k], shapes[k], dtypes[k], Device::cuda()));
  return tensors;
}

ConstTensors const_pointers(const std::vector<Tensor>& tensors) {
  ConstTensors pointers;
  for (const Tensor& tensor : tensors) pointers.push_back(&tensor);
  return pointers;
}

// y of one forward on CUDA from inputs `xs` (y starts as NaN).
std::vector<double> run_forward(const LayerCase& layer_case, const Storage& storage,
                                const std::vector<std::vector<double>>& xs) {
  auto layer = created(layer_case);
  const Shape output_shape = layer->output_shapes(layer_case.input_shapes)[0];
  Context ctx(Device::cuda());
  const std::vector<Tensor> inputs = tensors_of(xs, layer_case.input_shapes, storage.inputs);
  const std::vector<double> poison(static_cast<std::size_t>(shape_numel(output_shape)), std::nan(""));
  Tensor output = Tensor::from_values(poison, output_shape, storage.output, Device::cuda());
  layer->forward(ctx, const_pointers(inputs), {&output});
  return output.to_values();
}

// The input gradients of one backward on CUDA at inputs `xs`, output `y` and
// output gradient `dy` (the input gradients start as NaN).
std::vector<std::vector<double>> run_backward(const LayerCase& layer_case, const Storage& storage,
                                              const std::vector<std::vector<double>>& xs, const std::vector<double>& y,
                                              const std::vector<double>& dy) {
  auto layer = created(layer_case);
  const Shape output_shape = layer->output_shapes(layer_case.input_shapes)[0];
  Context ctx(Device::cuda());
  const std::vector<Tensor> inputs = tensors_of(xs, layer_case.input_shapes, storage.inputs);
  const Tensor output = Tensor::from_values(y, output_shape, storage.output, Device::cuda());
  const Tensor output_grad = Tensor::from_values(dy, output_shape, storage.output, Device::cuda());
  std::vector<std::vector<double>> poison;
  for (const auto& x : xs) poison.emplace_back(x.size(), std::nan(""));
  std::vector<Tensor> input_grads = tensors_of(poison, layer_case.input_shapes, storage.inputs);
  MutableTensors input_grad_pointers;
  for (Tensor& input_grad : input_grads) input_grad_pointers.push_back(&input_grad);
  layer->backward(ctx, const_pointers(inputs), {&output}, {&output_grad}, input_grad_pointers);
  std::vector<std::vector<double>> result;
  for (const Tensor& input_grad : input_grads) result.push_back(input_grad.to_values());
  return result;
}

void check_storage(const LayerCase& layer_case, const Storage& storage, std::mt19937_64& rng) {
  SCOPED_TRACE(layer_case.type + " " + layer_case.params.dump() + " with " +
               std::to_string(layer_case.input_shapes.size()) + " inputs, " + storage_str(storage));
  ASSERT_EQ(storage.inputs.size(), layer_case.input_shapes.size());
  std::vector<std::vector<double>> xs;
  for (const Shape& shape : layer_case.input_shapes)
    xs.push_back(bf16_values(static_cast<std::size_t>(shape_numel(shape)), -2.0, 2.0, rng));
  const Shape output_shape = created(layer_case)->output_shapes(layer_case.input_shapes)[0];
  const std::vector<double> dy = bf16_values(static_cast<std::size_t>(shape_numel(output_shape)), -1.0, 1.0, rng);
  const Storage reference_storage = all_f32(xs.size());

  const std::vector<double> reference_y = run_forward(layer_case, reference_storage, xs);
  const std::vector<double> y = run_forward(layer_case, storage, xs);
  expect_stored(reference_y, y, storage.output, "y");

  const auto reference_dx = run_backward(layer_case, reference_storage, xs, y, dy);
  const auto dx = run_backward(layer_case, storage, xs, y, dy);
  for (std::size_t k = 0; k < xs.size(); ++k)
    expect_stored(reference_dx[k], dx[k], storage.inputs[k], "dx" + std::to_string(k));
}

TEST(ElementwiseBf16Storage, OneInputLayersGiveTheF32ResultsRoundedCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  std::mt19937_64 rng(81);
  for (const LayerCase& layer_case : one_input_layers())
    for (const Storage& storage :
         {Storage{{DType::bf16}, DType::bf16}, Storage{{DType::bf16}, DType::f32}, Storage{{DType::f32}, DType::bf16}})
      check_storage(layer_case, storage, rng);
}

// Every combination of f32 and bf16 for a, b and y (and their gradients).
TEST(ElementwiseBf16Storage, AddAndMulGiveTheF32ResultsRoundedCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  std::mt19937_64 rng(82);
  for (const std::string type : {"Add", "Mul"})
    for (DType a : {DType::f32, DType::bf16})
      for (DType b : {DType::f32, DType::bf16})
        for (DType y : {DType::f32, DType::bf16})
          check_storage({type, nlohmann::json::object(), {kOddShape, kOddShape}}, {{a, b}, y}, rng);
}

// Three inputs: with y bf16 the partial sum x0 + x1 must stay f32, so that y
// is the f32 sum rounded once.
TEST(ElementwiseBf16Storage, AddOfThreeInputsRoundsOnceCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  std::mt19937_64 rng(83);
  const LayerCase add{"Add", nlohmann::json::object(), {kOddShape, kOddShape, kOddShape}};
  for (const Storage& storage : {Storage{{DType::bf16, DType::bf16, DType::bf16}, DType::bf16},
                                 Storage{{DType::f32, DType::f32, DType::f32}, DType::bf16},
                                 Storage{{DType::bf16, DType::f32, DType::bf16}, DType::f32}})
    check_storage(add, storage, rng);
}

// Inputs that broadcast (channel and spatial gates, either side, three
// inputs): the gradient's sums run in f32 and are rounded once, as stored.
TEST(ElementwiseBf16Storage, BroadcastAddAndMulGiveTheF32ResultsRoundedCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  std::mt19937_64 rng(84);
  const std::vector<std::vector<Shape>> pairs{
      {kOddShape, {2, 3, 1, 1}}, {{2, 1, 5, 7}, kOddShape}, {{1, 3, 1, 1}, {2, 1, 5, 7}}};
  for (const std::string type : {"Add", "Mul"})
    for (const auto& shapes : pairs)
      for (DType a : {DType::f32, DType::bf16})
        for (DType y : {DType::f32, DType::bf16})
          check_storage({type, nlohmann::json::object(), shapes}, {{a, DType::bf16}, y}, rng);
  const LayerCase add{"Add", nlohmann::json::object(), {{1, 3, 1, 1}, kOddShape, {2, 1, 5, 7}}};
  for (DType y : {DType::f32, DType::bf16}) check_storage(add, {{DType::bf16, DType::f32, DType::bf16}, y}, rng);
}

TEST(ElementwiseBf16Storage, StoredOnlyOnCuda) {
  for (const LayerCase& layer_case : one_input_layers()) {
    auto layer = registry.create(layer_case.type, "e", layer_case.params);
    EXPECT_TRUE(layer->traits(Device::cuda()).stores_bf16) << layer_case.type;
    EXPECT_FALSE(layer->traits(Device::cpu()).stores_bf16) << layer_case.type;
  }
  for (const std::string type : {"Add", "Mul"}) {
    auto layer = registry.create(type, "e", nlohmann::json::object());
    EXPECT_TRUE(layer->traits(Device::cuda()).stores_bf16) << type;
    EXPECT_FALSE(layer->traits(Device::cpu()).stores_bf16) << type;
  }
}

TEST(ElementwiseBf16Storage, RefusedOnTheCpuByName) {
  auto layer = registry.create("ReLU", "r", nlohmann::json::object());
  testing::expect_cpu_refuses_bf16_input(*layer, "r", {1, 2, 3, 3});
}

}  // namespace
}  // namespace plexus

// Conv2d and ConvTranspose2d storing activations in bf16 (LayerTraits::stores_bf16).
// The contract: storing a tensor in bf16 changes nothing but its rounding.
// With inputs whose values are bf16 values (so the bf16 and the f32 tensors
// hold the same numbers), every output stored in bf16 is the f32 path's
// output rounded to bf16 (nearest even), every output stored in f32 is the
// f32 path's, and the parameter gradients (f32) are the same bits, for each
// mix of f32 and bf16 tensors, on problems that reach every path of the
// convolution engine (convolution/implicit_gemm.h), the im2col + cuBLAS
// passes and the few-channel kernels, at each precision. On the CPU a bf16
// tensor is refused with an error naming the layer.
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "layers/bf16_storage_test_support.h"
#include "layers/layer_test_support.h"
#include "plexus/builtin_layers.h"
#include "plexus/testing/gtest_helpers.h"

#if PLEXUS_WITH_CUDA
#include "convolution/channel_ops.h"
#include "convolution/nhwc_layout.h"
#include "convolution/weight_grad_layout.h"
#endif

namespace plexus {
namespace {

using nlohmann::json;

using testing::bf16_values;
using testing::expect_stored;

const Registry registry = builtin_registry();

std::unique_ptr<Layer> make_layer(const std::string& type, const json& params, const Shape& input, Device device) {
  auto layer = registry.create(type, "c", params);
  layer->output_shapes({input});
  layer->create_parameters({input});
  std::mt19937_64 rng(7);
  layer->initialize_parameters(DType::f32, device, rng);
  return layer;
}

// A layer and input shape, and which part of the engine it exercises.
struct Problem {
  std::string type;
  json params;
  Shape input;
  std::string path;
};

// In the engine's Conv2d terms (implicit_gemm.h) a ConvTranspose2d's X is
// its output and Y its input. Output planes stay within 1024 pixels, so the
// bias gradient sums each channel in one block (one atomicAdd: the same
// order in every run).
std::vector<Problem> problems() {
  return {
      {"Conv2d",
       {{"out_channels", 64}, {"kernel", 5}, {"stride", 2}, {"padding", 2}},
       {2, 64, 16, 16},
       "tap-major gathers (NHWC copies), NCHW weight gradient"},
      {"Conv2d",
       {{"out_channels", 32}, {"kernel", 3}, {"padding", 1}},
       {2, 8, 12, 12},
       "flat-K forward gather; input gradient by im2col + cuBLAS"},
      {"Conv2d",
       {{"out_channels", 8}, {"kernel", 3}, {"padding", 1}},
       {2, 32, 10, 10},
       "forward by im2col + cuBLAS (Co <= 16); flat-K input gradient"},
      {"Conv2d",
       {{"out_channels", 64}, {"kernel", 5}, {"stride", 2}, {"padding", 2}},
       {2, 3, 32, 32},
       "few-channel forward, input gradient and weight gradient (dY rows of 16 pixels: whole 16-byte chunks)"},
      {"Conv2d",
       {{"out_channels", 64}, {"kernel", 5}, {"stride", 2}, {"padding", 2}},
       {2, 3, 30, 30},
       "few-channel passes with Y rows of 15 pixels: element-wise stores and dY rows, unaligned input gradient"},
      {"Conv2d",
       {{"out_channels", 64}, {"kernel", 9}, {"stride", 4}, {"padding", 4}},
       {1, 3, 32, 32},
       "few-channel passes of a 9x9 kernel (243 taps: the weight gradient's widest tiling)"},
      {"Conv2d",
       {{"out_channels", 160}, {"kernel", 3}, {"padding", 1}},
       {1, 4, 12, 20},
       "few-channel passes, 4 channels, two blocks of output channels, dY rows of 20 pixels (4-pixel chunks)"},
      {"Conv2d", {{"out_channels", 64}, {"kernel", 1}}, {2, 64, 8, 8}, "1x1 kernel"},
      {"Conv2d", {{"out_channels", 64}, {"kernel", 3}, {"padding", 1}}, {2, 64, 8, 8}, "3x3 kernel, stride 1"},
      {"Conv2d",
       {{"out_channels", 128}, {"kernel", 3}, {"padding", 1}},
       {2, 128, 4, 4},
       "split K (4x4 images, 128 channels)"},
      {"Conv2d",
       {{"out_channels", 128}, {"kernel", 3}, {"padding", 1}},
       {1, 128, 32, 32},
       "tap-major weight gradient (Ci a multiple of 128; on Hopper the wgmma one)"},
      {"ConvTranspose2d",
       {{"out_channels", 64}, {"kernel", 5}, {"stride", 2}, {"padding", 2}, {"output_padding", 1}},
       {2, 64, 8, 8},
       "tap-major backward_data phases and forward gather"},
      {"ConvTranspose2d",
       {{"out_channels", 32}, {"kernel", 3}, {"padding", 1}},
       {2, 8, 12, 12},
       "flat-K backward_data gather; input gradient by im2col + cuBLAS"},
      {"ConvTranspose2d",
       {{"out_channels", 8}, {"kernel", 3}, {"padding", 1}},
       {2, 32, 10, 10},
       "forward by im2col + cuBLAS; flat-K input gradient"},
      {"ConvTranspose2d",
       {{"out_channels", 3}, {"kernel", 5}, {"stride", 2}, {"padding", 2}, {"output_padding", 1}},
       {2, 64, 16, 16},
       "few-channel forward (onto an RGB image), input gradient and weight gradient"},
      {"ConvTranspose2d",
       {{"out_channels", 3}, {"kernel", 5}, {"stride", 2}, {"padding", 2}, {"output_padding", 1}},
       {2, 64, 15, 15},
       "few-channel forward from rows of 15 pixels (Y copied element by element), input and weight gradient"},
      {"ConvTranspose2d",
       {{"out_channels", 3}, {"kernel", 9}, {"stride", 4}, {"padding", 4}, {"output_padding", 3}},
       {1, 64, 8, 8},
       "few-channel passes of a 9x9 kernel onto an RGB image"},
      {"ConvTranspose2d", {{"out_channels", 64}, {"kernel", 1}}, {2, 64, 8, 8}, "1x1 kernel"},
      {"ConvTranspose2d", {{"out_channels", 64}, {"kernel", 3}, {"padding", 1}}, {2, 64, 8, 8}, "3x3 kernel, stride 1"},
      {"ConvTranspose2d",
       {{"out_channels", 128}, {"kernel", 3}, {"padding", 1}},
       {2, 128, 4, 4},
       "split K (4x4 images, 128 channels)"},
      {"ConvTranspose2d",
       {{"out_channels", 128}, {"kernel", 3}, {"padding", 1}},
       {1, 128, 32, 32},
       "tap-major weight gradient (on Hopper the wgmma one)"},
  };
}

// The dtypes of the layer's input (and its gradient) and of its output (and
// its gradient), as a Net stores a blob and its gradient alike.
struct Storage {
  DType input;
  DType output;
};

std::string describe(const Storage& storage) {
  return std::string("input ") + dtype_name(storage.input) + ", output " + dtype_name(storage.output);
}

struct Pass {
  std::vector<double> output, input_grad;
  std::map<std::string, std::vector<double>> parameter_grads;
};

// One forward and one backward on CUDA at `precision`, with the given storage.
Pass run_pass(Layer& layer, Precision precision, const Shape& input_shape, const Storage& storage,
              const std::vector<double>& x_values, const std::vector<double>& dy_values) {
  Context ctx(Device::cuda());
  ctx.set_precision(precision);
  const Shape output_shape = layer.output_shapes({input_shape})[0];
  const Tensor x = Tensor::from_values(x_values, input_shape, storage.input, Device::cuda());
  Tensor y(output_shape, storage.output, Device::cuda());
  const Tensor dy = Tensor::from_values(dy_values, output_shape, storage.output, Device::cuda());
  Tensor dx(input_shape, storage.input, Device::cuda());
  for (Parameter* p : layer.parameters()) p->grad.fill_zero();
  layer.forward(ctx, {&x}, {&y});
  layer.backward(ctx, {&x}, {&y}, {&dy}, {&dx});
  ctx.synchronize();
  Pass pass{y.to_values(), dx.to_values(), {}};
  for (Parameter* p : layer.parameters()) pass.parameter_grads[p->name] = p->grad.to_values();
  return pass;
}

TEST(ConvBf16Storage, StoredResultsAreTheF32ResultsRoundedCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  const Storage all_f32{DType::f32, DType::f32};
  const std::vector<Storage> storages = {
      {DType::bf16, DType::bf16}, {DType::bf16, DType::f32}, {DType::f32, DType::bf16}};
  std::mt19937_64 rng(2024);
  for (const Problem& problem : problems()) {
    auto layer = make_layer(problem.type, problem.params, problem.input, Device::cuda());
    ASSERT_TRUE(layer->traits(Device::cuda()).takes_bf16()) << problem.type;
    const Shape output_shape = layer->output_shapes({problem.input})[0];
    const std::vector<double> x = bf16_values(static_cast<std::size_t>(shape_numel(problem.input)), -1.0, 1.0, rng);
    const std::vector<double> dy = bf16_values(static_cast<std::size_t>(shape_numel(output_shape)), -1.0, 1.0, rng);
    for (const Precision precision : {Precision::bf16, Precision::tf32, Precision::f32}) {
      const Pass reference = run_pass(*layer, precision, problem.input, all_f32, x, dy);
      for (const Storage& storage : storages) {
        const std::string what = problem.type + " " + problem.params.dump() + " on " + shape_str(problem.input) + " (" +
                                 problem.path + ") at " + precision_name(precision) + ", " + describe(storage);
        const Pass pass = run_pass(*layer, precision, problem.input, storage, x, dy);
        expect_stored(reference.output, pass.output, storage.output, what + ": output");
        expect_stored(reference.input_grad, pass.input_grad, storage.input, what + ": input gradient");
        for (const auto& [name, grad] : reference.parameter_grads)
          expect_stored(grad, pass.parameter_grads.at(name), DType::f32, what + ": " + name + " gradient");
      }
    }
  }
}

#if PLEXUS_WITH_CUDA
// Runs copy(ctx, source, f32 destination, bf16 destination) once from an f32
// source and once from a bf16 source of the same values (shape
// source_shape), into a destination of `count` elements in `out`, and
// expects the same values: the copies widen a bf16 source exactly.
template <class Copy>
void expect_bf16_source_gives_the_same(const std::string& what, const Shape& source_shape, std::int64_t count,
                                       DType out, Copy&& copy) {
  Context ctx(Device::cuda());
  std::mt19937_64 rng(11);
  const std::vector<double> values = bf16_values(static_cast<std::size_t>(shape_numel(source_shape)), -1.0, 1.0, rng);
  const Tensor f32_source = Tensor::from_values(values, source_shape, DType::f32, Device::cuda());
  const Tensor bf16_source = Tensor::from_values(values, source_shape, DType::bf16, Device::cuda());
  std::vector<double> results[2];
  for (int run = 0; run < 2; ++run) {
    Tensor destination({count}, out, Device::cuda());
    float* f32 = out == DType::f32 ? destination.data<float>() : nullptr;
    auto* bf16 = out == DType::bf16 ? reinterpret_cast<std::uint16_t*>(destination.data<BFloat16>()) : nullptr;
    if (run == 0) copy(ctx, f32_source.data<float>(), f32, bf16);
    else copy(ctx, bf16_source.data<BFloat16>(), f32, bf16);
    ctx.synchronize();
    results[run] = destination.to_values();
  }
  EXPECT_EQ(results[0], results[1]) << what;
}

// The copies the engine makes before its tap-major passes, and the bias
// gradient's channel sums, read a bf16 activation as its f32 values.
TEST(ConvBf16Storage, CopiesAndChannelSumsReadBf16SourcesAsTheirValuesCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  // NHWC: 2 images of 5 channels x 21 pixels; channel strides 8 (the bf16
  // pair kernel) and 7 (one element per store).
  for (const std::int64_t stride : {8, 7}) {
    expect_bf16_source_gives_the_same("nchw_to_nhwc", {2, 5, 3, 7}, 2 * 21 * stride, DType::f32,
                                      [&](Context& ctx, const auto* source, float* f32, std::uint16_t*) {
                                        layers::nchw_to_nhwc_cuda(ctx, source, 2, 5, 21, stride, f32);
                                      });
    expect_bf16_source_gives_the_same("nchw_to_nhwc_bf16", {2, 5, 3, 7}, 2 * 21 * stride, DType::bf16,
                                      [&](Context& ctx, const auto* source, float*, std::uint16_t* bf16) {
                                        layers::nchw_to_nhwc_bf16_cuda(ctx, source, 2, 5, 21, stride, bf16);
                                      });
  }
  expect_bf16_source_gives_the_same("nchw_to_channel_rows_bf16", {2, 3, 5, 7}, 3 * 80, DType::bf16,
                                    [](Context& ctx, const auto* source, float*, std::uint16_t* bf16) {
                                      layers::nchw_to_channel_rows_bf16_cuda(ctx, source, 2, 3, 35, 80, bf16);
                                    });
  // Phases of 9x10 images at stride 2 (5 x 5 each, rows padded to 8).
  const std::int64_t phase_elements = 4 * 2 * 3 * 5 * 8;
  expect_bf16_source_gives_the_same("nchw_to_phases", {2, 3, 9, 10}, phase_elements, DType::f32,
                                    [](Context& ctx, const auto* source, float* f32, std::uint16_t*) {
                                      layers::nchw_to_phases_cuda(ctx, source, 2, 3, 9, 10, 2, 8, f32);
                                    });
  expect_bf16_source_gives_the_same("nchw_to_phases_bf16", {2, 3, 9, 10}, phase_elements, DType::bf16,
                                    [](Context& ctx, const auto* source, float*, std::uint16_t* bf16) {
                                      layers::nchw_to_phases_bf16_cuda(ctx, source, 2, 3, 9, 10, 2, 8, bf16);
                                    });
  // Rows of 9 shifted by -1, 0, 1 into rows of 12.
  const std::int64_t shifted_elements = 3 * 2 * 3 * 4 * 12;
  expect_bf16_source_gives_the_same("shifted_rows", {2, 3, 4, 9}, shifted_elements, DType::f32,
                                    [](Context& ctx, const auto* source, float* f32, std::uint16_t*) {
                                      layers::shifted_rows_cuda(ctx, source, 2, 3, 4, 9, -1, 3, 12, f32);
                                    });
  expect_bf16_source_gives_the_same("shifted_rows_bf16", {2, 3, 4, 9}, shifted_elements, DType::bf16,
                                    [](Context& ctx, const auto* source, float*, std::uint16_t* bf16) {
                                      layers::shifted_rows_bf16_cuda(ctx, source, 2, 3, 4, 9, -1, 3, 12, bf16);
                                    });
  // Channel sums over planes of whole groups of four (16 pixels) and not (25).
  for (const std::int64_t side : {4, 5})
    expect_bf16_source_gives_the_same("accumulate_channel_sums", {2, 3, side, side}, 3, DType::f32,
                                      [&](Context& ctx, const auto* source, float* f32, std::uint16_t*) {
                                        layers::accumulate_channel_sums_cuda(ctx, source, 2, 3, side * side, f32);
                                      });
}
#endif

// bf16 activations go with f32 parameters only.
TEST(ConvBf16Storage, RefusesBf16TensorsWithF64ParametersCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  auto layer = registry.create("Conv2d", "c", json{{"out_channels", 4}, {"kernel", 3}});
  const Shape input{1, 2, 5, 5};
  layer->output_shapes({input});
  layer->create_parameters({input});
  std::mt19937_64 rng(3);
  layer->initialize_parameters(DType::f64, Device::cuda(), rng);
  Context ctx(Device::cuda());
  const Tensor x(input, DType::bf16, Device::cuda());
  Tensor y(layer->output_shapes({input})[0], DType::f64, Device::cuda());
  const std::string message = testing::config_error_of([&] { layer->forward(ctx, {&x}, {&y}); });
  EXPECT_TRUE(testing::contains(message, "node 'c' (Conv2d)")) << message;
  EXPECT_TRUE(testing::contains(message, "f64 parameters")) << message;
}

TEST(ConvBf16Storage, StoresBf16OnlyOnCuda) {
  for (const std::string type : {"Conv2d", "ConvTranspose2d"}) {
    auto layer = registry.create(type, "c", json{{"out_channels", 4}, {"kernel", 3}});
    EXPECT_FALSE(layer->traits(Device::cpu()).stores_bf16) << type;
    EXPECT_EQ(layer->traits(Device::cuda()).stores_bf16, static_cast<bool>(PLEXUS_WITH_CUDA)) << type;
  }
}

// The layers next to an RGB image (<= 4 channels on X's side: a Conv2d's
// input, a ConvTranspose2d's output) ask the Net for bf16 on CUDA like every
// other convolution: their few-channel kernels read and write the
// many-channel side in bf16 natively.
TEST(ConvBf16Storage, FewChannelLayersAskForBf16Storage) {
  const Device cuda = Device::cuda();
  const bool with_cuda = PLEXUS_WITH_CUDA;
  struct Case {
    std::string type;
    std::int64_t in_channels, out_channels;
  };
  for (const Case& c : {Case{"Conv2d", 3, 64}, Case{"Conv2d", 4, 64}, Case{"Conv2d", 5, 64}, Case{"Conv2d", 64, 3},
                        Case{"ConvTranspose2d", 64, 3}, Case{"ConvTranspose2d", 3, 64}}) {
    const Shape input{1, c.in_channels, 8, 8};
    auto layer = make_layer(c.type, json{{"out_channels", c.out_channels}, {"kernel", 3}}, input, Device::cpu());
    const std::string what = c.type + " " + std::to_string(c.in_channels) + "->" + std::to_string(c.out_channels);
    EXPECT_EQ(layer->traits(cuda).stores_bf16, with_cuda) << what;
    EXPECT_EQ(layer->traits(cuda).takes_bf16(), with_cuda) << what;
    EXPECT_FALSE(layer->traits(Device::cpu()).stores_bf16) << what;
  }
}

// The CPU kernels take f32 or f64 tensors: a bf16 input, output or gradient
// is refused before any element is read, naming the layer and the tensor.
TEST(ConvBf16Storage, CpuRefusesBf16TensorsNamingTheLayer) {
  for (const std::string type : {"Conv2d", "ConvTranspose2d"}) {
    const Shape input{1, 4, 6, 6};
    auto layer = make_layer(type, json{{"out_channels", 4}, {"kernel", 3}}, input, Device::cpu());
    const Shape output = layer->output_shapes({input})[0];
    Context ctx;
    const Tensor x_f32(input, DType::f32), x_bf16(input, DType::bf16);
    Tensor y_f32(output, DType::f32), y_bf16(output, DType::bf16);
    Tensor dx_f32(input, DType::f32), dx_bf16(input, DType::bf16);
    const Tensor dy_f32(output, DType::f32), dy_bf16(output, DType::bf16);
    const std::string who = "node 'c' (" + type + ")";
    const auto expect_refused = [&](const std::string& message, const std::string& tensor) {
      EXPECT_TRUE(testing::contains(message, who)) << message;
      EXPECT_TRUE(testing::contains(message, "bf16")) << message;
      EXPECT_TRUE(testing::contains(message, tensor)) << message;
    };
    expect_refused(testing::config_error_of([&] { layer->forward(ctx, {&x_bf16}, {&y_f32}); }), x_bf16.describe());
    expect_refused(testing::config_error_of([&] { layer->forward(ctx, {&x_f32}, {&y_bf16}); }), y_bf16.describe());
    expect_refused(testing::config_error_of([&] { layer->backward(ctx, {&x_f32}, {&y_f32}, {&dy_bf16}, {&dx_f32}); }),
                   dy_bf16.describe());
    expect_refused(testing::config_error_of([&] { layer->backward(ctx, {&x_f32}, {&y_f32}, {&dy_f32}, {&dx_bf16}); }),
                   dx_bf16.describe());
    // The same layer still runs on f32 tensors.
    EXPECT_NO_THROW(layer->forward(ctx, {&x_f32}, {&y_f32}));
    EXPECT_NO_THROW(layer->backward(ctx, {&x_f32}, {&y_f32}, {&dy_f32}, {&dx_f32}));
  }
}

}  // namespace
}  // namespace plexus

// bf16 activation storage (LayerTraits::stores_bf16) of the layers that use it:
// the convolutions, GDN and IGDN, and the element-wise layers, each section
// below in its own namespace with the contract it checks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "layers/layer_test_support.h"
#include "plexus/bfloat16.h"
#include "plexus/builtin_layers.h"
#include "plexus/error.h"
#include "plexus/testing/gtest_helpers.h"

#if PLEXUS_WITH_CUDA
#include "convolution/channel_ops.h"
#include "convolution/nhwc_layout.h"
#include "convolution/weight_grad_layout.h"
#endif

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
namespace plexus {
namespace conv_storage {
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
}  // namespace conv_storage
}  // namespace plexus

// GDN and IGDN with bf16 activation storage (LayerTraits::stores_bf16): storing in
// bf16 changes nothing but the rounding of the stored tensors. With inputs
// whose values are bf16 numbers, a pass on bf16 tensors must give exactly
// the f32 pass's output and input gradient rounded to bf16 (nearest even),
// and bit for bit its parameter gradients (f32): on CUDA the same kernels
// run on the same f32 values, whether they read bf16 themselves (tensor-core
// kernels, BF16 products, C <= 192, each side's dtype on its own) or
// through f32 stand-ins (the rest). The one exception: calls with every
// tensor bf16 and a multiple of 8 pixels per image run the bf16-tile
// kernels, with the same products but their own split of the sums, so there
// the output and input gradient may differ by one bf16 unit in the last
// place (on Hopper they are the same bits) and the parameter gradients by
// the order of their f32 additions.
// On the CPU a bf16 tensor is refused by name.
namespace plexus {
namespace gdn_storage {
namespace {

using testing::bf16_values;
using testing::expect_stored;

const Registry registry = builtin_registry();

struct Pass {
  std::vector<double> y, dx, beta_grad, gamma_grad;
};

// One forward and backward on CUDA with f32 parameters; x and dx stored in
// input_dtype, y and dy in output_dtype (f32 or bf16). y and dx start as NaN.
Pass run_pass(const std::string& type, const Shape& shape, Precision precision, DType input_dtype, DType output_dtype,
              const std::vector<double>& beta, const std::vector<double>& gamma, const std::vector<double>& x,
              const std::vector<double>& dy) {
  const Device device = Device::cuda();
  const std::int64_t channels = shape[1];
  auto layer = registry.create(type, "g", {});
  layer->output_shapes({shape});
  layer->create_parameters({shape});
  std::mt19937_64 unused(0);
  layer->initialize_parameters(DType::f32, device, unused);
  layer->parameter("beta").value = Tensor::from_values(beta, {channels}, DType::f32, device);
  layer->parameter("gamma").value = Tensor::from_values(gamma, {channels, channels}, DType::f32, device);
  Context ctx(device);
  ctx.set_precision(precision);
  const std::vector<double> poison(x.size(), std::nan(""));
  Tensor input = Tensor::from_values(x, shape, input_dtype, device);
  Tensor output = Tensor::from_values(poison, shape, output_dtype, device);
  Tensor output_grad = Tensor::from_values(dy, shape, output_dtype, device);
  Tensor input_grad = Tensor::from_values(poison, shape, input_dtype, device);
  layer->forward(ctx, {&input}, {&output});
  layer->backward(ctx, {&input}, {&output}, {&output_grad}, {&input_grad});
  return {output.to_values(), input_grad.to_values(), layer->parameter("beta").grad.to_values(),
          layer->parameter("gamma").grad.to_values()};
}

// Expects sums over pixels (dbeta, dgamma) to be the reference's up to the
// order of f32 additions: within 1e-5 of the largest reference magnitude
// (f32 reordering moves them by about 1e-7 of it).
void expect_same_sums(const std::vector<double>& reference, const std::vector<double>& actual,
                      const std::string& what) {
  ASSERT_EQ(reference.size(), actual.size()) << what;
  double largest = 0.0;
  for (double value : reference) largest = std::max(largest, std::abs(value));
  const double tolerance = 1e-5 * largest;
  std::size_t wrong = 0, first_wrong = 0;
  for (std::size_t i = 0; i < reference.size(); ++i)
    if (!(std::abs(actual[i] - reference[i]) <= tolerance) && wrong++ == 0) first_wrong = i;
  EXPECT_EQ(wrong, 0u) << what << ": " << wrong << " of " << reference.size() << " elements differ by more than "
                       << tolerance << "; first [" << first_wrong << "] " << actual[first_wrong] << " instead of "
                       << reference[first_wrong];
}

// Expects `actual` (bf16 values) to be `reference` rounded to bf16, or
// the bf16 next to it on either side.
void expect_stored_within_one_unit(const std::vector<double>& reference, const std::vector<double>& actual,
                                   const std::string& what) {
  ASSERT_EQ(reference.size(), actual.size()) << what;
  std::size_t wrong = 0, first_wrong = 0;
  for (std::size_t i = 0; i < reference.size(); ++i) {
    const double expected = testing::rounded_to_bf16(reference[i]);
    const float magnitude = static_cast<float>(std::abs(expected));
    const double unit = f32_from_bf16_bits(static_cast<std::uint16_t>(bf16_bits_from_f32(magnitude) + 1)) - magnitude;
    if (!(std::abs(actual[i] - expected) <= unit) && wrong++ == 0) first_wrong = i;
  }
  EXPECT_EQ(wrong, 0u) << what << ": " << wrong << " of " << reference.size()
                       << " elements are more than one bf16 unit from the rounded reference; first [" << first_wrong
                       << "] " << actual[first_wrong] << " instead of "
                       << testing::rounded_to_bf16(reference[first_wrong]);
}

// Whether a call runs the bf16-tile kernels: every tensor bf16, BF16
// products, C <= 192, a multiple of 8 pixels per image.
bool runs_bf16_tiles(const Shape& shape, Precision precision, DType input_dtype, DType output_dtype) {
  std::int64_t pixels = 1;
  for (std::size_t axis = 2; axis < shape.size(); ++axis) pixels *= shape[axis];
  return precision == Precision::bf16 && input_dtype == DType::bf16 && output_dtype == DType::bf16 && shape[1] <= 192 &&
         pixels % 8 == 0;
}

void check_storage(const std::string& type, const Shape& shape, Precision precision, DType input_dtype,
                   DType output_dtype, std::mt19937_64& rng) {
  SCOPED_TRACE(type + " " + shape_str(shape) + " " + precision_name(precision) + ", x " + dtype_name(input_dtype) +
               ", y " + dtype_name(output_dtype));
  const auto c = static_cast<std::size_t>(shape[1]);
  const std::vector<double> beta = bf16_values(c, 0.7, 1.3, rng);
  const std::vector<double> gamma = bf16_values(c * c, 0.1, 0.6, rng);
  const std::vector<double> x = bf16_values(static_cast<std::size_t>(shape_numel(shape)), -1.0, 1.0, rng);
  const std::vector<double> dy = bf16_values(x.size(), -1.0, 1.0, rng);
  const Pass reference = run_pass(type, shape, precision, DType::f32, DType::f32, beta, gamma, x, dy);
  const Pass stored = run_pass(type, shape, precision, input_dtype, output_dtype, beta, gamma, x, dy);
  if (runs_bf16_tiles(shape, precision, input_dtype, output_dtype)) {
    expect_stored_within_one_unit(reference.y, stored.y, "y");
    expect_stored_within_one_unit(reference.dx, stored.dx, "dx");
    expect_same_sums(reference.beta_grad, stored.beta_grad, "dbeta");
    expect_same_sums(reference.gamma_grad, stored.gamma_grad, "dgamma");
    return;
  }
  expect_stored(reference.y, stored.y, output_dtype, "y");
  expect_stored(reference.dx, stored.dx, input_dtype, "dx");
  expect_stored(reference.beta_grad, stored.beta_grad, DType::f32, "dbeta");
  expect_stored(reference.gamma_grad, stored.gamma_grad, DType::f32, "dgamma");
}

// BF16 products: the tensor-core kernels read and write bf16 (C padded to
// 32, 64, 128, 192), stand-ins at C = 256. 96 pixels per image (bf16 tiles:
// tiles straddle images, the last one is partial), 32 in one image (bf16
// tiles: one partial tile) and 99 (f32 tiles, scalar access).
TEST(GDNBf16Storage, Bf16ProductsGiveTheF32ResultsRoundedCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  std::mt19937_64 rng(71);
  for (const std::string type : {"GDN", "IGDN"})
    for (std::int64_t channels : {3, 64, 128, 192, 256})
      for (const Shape& shape : {Shape{3, channels, 8, 12}, Shape{1, channels, 4, 8}, Shape{2, channels, 9, 11}})
        check_storage(type, shape, Precision::bf16, DType::bf16, DType::bf16, rng);
}

TEST(GDNBf16Storage, MixedStorageGivesTheF32ResultsRoundedCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  std::mt19937_64 rng(72);
  // The tensor-core kernels with one side bf16 (C = 64: two buffers; C = 192: one), and stand-ins at C = 256.
  for (const std::string type : {"GDN", "IGDN"})
    for (std::int64_t channels : {64, 192, 256}) {
      check_storage(type, {2, channels, 8, 12}, Precision::bf16, DType::bf16, DType::f32, rng);
      check_storage(type, {2, channels, 9, 11}, Precision::bf16, DType::f32, DType::bf16, rng);
    }
}

// TF32 products and strict f32 have no bf16 kernels: f32 stand-ins, the same guarantee.
TEST(GDNBf16Storage, OtherPrecisionsGiveTheF32ResultsRoundedCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  std::mt19937_64 rng(73);
  for (const Precision precision : {Precision::tf32, Precision::f32})
    for (std::int64_t channels : {64, 256})
      check_storage("GDN", {2, channels, 8, 12}, precision, DType::bf16, DType::bf16, rng);
}

TEST(GDNBf16Storage, RefusedOnTheCpuByName) {
  auto layer = registry.create("GDN", "g", {});
  const Shape shape{1, 4, 2, 2};
  layer->output_shapes({shape});
  layer->create_parameters({shape});
  std::mt19937_64 rng(0);
  layer->initialize_parameters(DType::f32, Device::cpu(), rng);
  EXPECT_FALSE(layer->traits(Device::cpu()).stores_bf16);
  EXPECT_TRUE(layer->traits(Device::cuda()).stores_bf16);
  testing::expect_cpu_refuses_bf16_input(*layer, "g", shape);
}

}  // namespace
}  // namespace gdn_storage
}  // namespace plexus

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
namespace plexus {
namespace elementwise_storage {
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
}  // namespace elementwise_storage
}  // namespace plexus

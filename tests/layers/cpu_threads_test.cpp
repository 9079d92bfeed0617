// The CPU kernels' threads, two sections:
//
// The CPU kernels spread a batch over threads (plexus/cpu_parallel.h): the
// results must be bit-identical for 1 and several threads, and parallel_for
// must run every item exactly once and pass exceptions on.
//
// The CPU forward passes of Conv2d, ConvTranspose2d, GDN and IGDN spread one
// image over the threads in blocks of rows or pixels: on images large enough
// for several blocks (odd sizes, stride, padding, two images), the outputs
// must be bit-identical for 1, 2 and 3 threads and match a naive f64 loop
// written here, so that the blocks are right, not only repeatable.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>

#include <atomic>
#include <cmath>
#include <cstring>
#include <random>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "plexus/builtin_layers.h"
#include "plexus/cpu_parallel.h"
#include "plexus/registry.h"

namespace plexus::batch_test {
namespace {

const Registry registry = builtin_registry();

// Restores the default thread count when a test ends.
struct ThreadCountGuard {
  ~ThreadCountGuard() { set_cpu_threads(0); }
};

// Forward + backward of one layer on fixed random data with `threads`
// threads; returns outputs, input gradients and parameter gradients, flattened.
std::vector<double> run_layer(const std::string& type, const nlohmann::json& params, const Shape& input_shape,
                              int threads) {
  set_cpu_threads(threads);
  auto layer = registry.create(type, "layer", params);
  const Shape output_shape = layer->output_shapes({input_shape})[0];
  layer->create_parameters({input_shape});
  std::mt19937_64 rng(7);
  layer->initialize_parameters(DType::f32, Device::cpu(), rng);
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  auto random = [&](const Shape& shape) {
    std::vector<double> values(static_cast<std::size_t>(shape_numel(shape)));
    for (auto& v : values) v = uniform(rng);
    return Tensor::from_values(values, shape);
  };
  Tensor x = random(input_shape), y(output_shape), dy = random(output_shape), dx(input_shape);
  Context ctx;
  for (Parameter* p : layer->parameters()) p->grad.fill_zero();
  layer->forward(ctx, {&x}, {&y});
  layer->backward(ctx, {&x}, {&y}, {&dy}, {&dx});
  std::vector<double> all = y.to_values();
  for (double v : dx.to_values()) all.push_back(v);
  for (Parameter* p : layer->parameters())
    for (double v : p->grad.to_values()) all.push_back(v);
  return all;
}

void expect_same_for_1_and_3_threads(const std::string& type, const nlohmann::json& params, const Shape& shape) {
  ThreadCountGuard guard;
  const std::vector<double> one = run_layer(type, params, shape, 1);
  const std::vector<double> three = run_layer(type, params, shape, 3);
  ASSERT_EQ(one.size(), three.size());
  for (std::size_t i = 0; i < one.size(); ++i) ASSERT_EQ(one[i], three[i]) << type << " value " << i;
}

TEST(CpuThreads, Conv2dSameResultFor1And3Threads) {
  expect_same_for_1_and_3_threads("Conv2d", {{"out_channels", 6}, {"kernel", 3}, {"stride", 2}, {"padding", 1}},
                                  {5, 4, 9, 9});
}

TEST(CpuThreads, ConvTranspose2dSameResultFor1And3Threads) {
  expect_same_for_1_and_3_threads(
      "ConvTranspose2d", {{"out_channels", 5}, {"kernel", 3}, {"stride", 2}, {"padding", 1}, {"output_padding", 1}},
      {5, 4, 6, 6});
}

TEST(CpuThreads, GdnSameResultFor1And3Threads) {
  expect_same_for_1_and_3_threads("GDN", {}, {5, 8, 6, 6});
  expect_same_for_1_and_3_threads("IGDN", {}, {5, 8, 6, 6});
}

TEST(CpuThreads, ParallelForRunsEveryItemOnce) {
  ThreadCountGuard guard;
  set_cpu_threads(4);
  std::vector<std::atomic<int>> calls(101);
  parallel_for(101, [&](std::int64_t i) { calls[static_cast<std::size_t>(i)]++; });
  for (const auto& c : calls) EXPECT_EQ(c.load(), 1);
}

TEST(CpuThreads, ParallelForPassesExceptionsOn) {
  ThreadCountGuard guard;
  set_cpu_threads(4);
  EXPECT_THROW(parallel_for(16,
                            [](std::int64_t i) {
                              if (i == 9) throw std::runtime_error("item 9");
                            }),
               std::runtime_error);
}

// A process forked after parallel_for started its threads has none of them
// (fork copies only the calling thread): its parallel_for must still finish.
TEST(CpuThreads, ParallelForRunsInAForkedChild) {
  ThreadCountGuard guard;
  set_cpu_threads(4);
  std::atomic<int> sum{0};
  parallel_for(8, [&](std::int64_t i) { sum += static_cast<int>(i); });  // the parent's threads start
  ASSERT_EQ(sum.load(), 28);
  const pid_t child = fork();
  ASSERT_GE(child, 0) << "fork failed";
  if (child == 0) {
    std::atomic<int> child_sum{0};
    parallel_for(8, [&](std::int64_t i) { child_sum += static_cast<int>(i); });
    _exit(child_sum.load() == 28 ? 0 : 1);
  }
  int status = 0;
  pid_t done = 0;
  for (int tries = 0; tries < 200 && done == 0; ++tries) {  // up to 10 s
    done = waitpid(child, &status, WNOHANG);
    if (done == 0) usleep(50000);
  }
  if (done == 0) {
    kill(child, SIGKILL);
    waitpid(child, &status, 0);
    FAIL() << "parallel_for in the forked child did not finish within 10 s";
  }
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the child's parallel_for missed items";
}

TEST(CpuThreads, ZeroMeansEveryCore) {
  ThreadCountGuard guard;
  set_cpu_threads(0);
  EXPECT_GE(cpu_threads(), 1);
  set_cpu_threads(3);
  EXPECT_EQ(cpu_threads(), 3);
}

}  // namespace
}  // namespace plexus::batch_test

namespace plexus::within_image_test {
namespace {

using nlohmann::json;

const Registry registry = builtin_registry();

// Restores the default thread count when a test ends.
struct ThreadCountGuard {
  ~ThreadCountGuard() { set_cpu_threads(0); }
};

std::vector<double> random_values(std::int64_t count, double low, double high, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> uniform(low, high);
  std::vector<double> values(static_cast<std::size_t>(count));
  for (auto& v : values) v = uniform(rng);
  return values;
}

// One layer in f32 on CPU with fixed random parameters and input.
struct LayerRun {
  std::unique_ptr<Layer> layer;
  Tensor x;
  Shape output_shape;
  // Fills the parameters and the input; `parameter_range` bounds the
  // parameters' values (GDN's stored beta and gamma must stay positive).
  LayerRun(const std::string& type, const json& params, const Shape& input_shape, double parameter_low,
           double parameter_high) {
    layer = registry.create(type, "layer", params);
    output_shape = layer->output_shapes({input_shape})[0];
    layer->create_parameters({input_shape});
    std::mt19937_64 rng(11);
    layer->initialize_parameters(DType::f32, Device::cpu(), rng);
    for (Parameter* p : layer->parameters())
      p->value.copy_from(Tensor::from_values(
          random_values(shape_numel(p->value.shape()), parameter_low, parameter_high, rng), p->value.shape()));
    x = Tensor::from_values(random_values(shape_numel(input_shape), -1.0, 1.0, rng), input_shape);
  }
  // The forward output with `threads` CPU threads.
  std::vector<float> forward(int threads) {
    set_cpu_threads(threads);
    Tensor y(output_shape);
    Context ctx;
    layer->forward(ctx, {&x}, {&y});
    const float* data = y.data<float>();
    return std::vector<float>(data, data + y.numel());
  }
  std::vector<double> parameter(const std::string& name) { return layer->parameter(name).value.to_values(); }
};

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Bit-identical for 1, 2 and 3 threads, and within `tolerance` of `reference`.
void expect_blocks_right(LayerRun& run, const std::vector<double>& reference, double tolerance) {
  ThreadCountGuard guard;
  const std::vector<float> one = run.forward(1);
  EXPECT_TRUE(same_bits(one, run.forward(2))) << "2 threads differ from 1";
  EXPECT_TRUE(same_bits(one, run.forward(3))) << "3 threads differ from 1";
  ASSERT_EQ(one.size(), reference.size());
  for (std::size_t i = 0; i < one.size(); ++i)
    ASSERT_NEAR(one[i], reference[i], tolerance * (1.0 + std::abs(reference[i]))) << "element " << i;
}

struct ConvParams {
  std::int64_t out, kernel, stride, padding, output_padding;
};

// y[n, o, a, b] = bias[o] + sum over c, i, j of W[o, c, i, j] x[n, c, a*s - p + i, b*s - p + j].
std::vector<double> naive_conv2d(const std::vector<double>& x, const Shape& xs, const std::vector<double>& w,
                                 const std::vector<double>& bias, const ConvParams& q, const Shape& ys) {
  const std::int64_t N = xs[0], C = xs[1], H = xs[2], W = xs[3], Ho = ys[2], Wo = ys[3], k = q.kernel;
  std::vector<double> y(static_cast<std::size_t>(N * q.out * Ho * Wo));
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t o = 0; o < q.out; ++o)
      for (std::int64_t a = 0; a < Ho; ++a)
        for (std::int64_t b = 0; b < Wo; ++b) {
          double sum = bias[o];
          for (std::int64_t c = 0; c < C; ++c)
            for (std::int64_t i = 0; i < k; ++i)
              for (std::int64_t j = 0; j < k; ++j) {
                const std::int64_t row = a * q.stride - q.padding + i, col = b * q.stride - q.padding + j;
                if (row < 0 || row >= H || col < 0 || col >= W) continue;
                sum += w[((o * C + c) * k + i) * k + j] * x[((n * C + c) * H + row) * W + col];
              }
          y[((n * q.out + o) * Ho + a) * Wo + b] = sum;
        }
  return y;
}

// PyTorch's ConvTranspose2d: y[n, o, a*s - p + i, b*s - p + j] += W[c, o, i, j] x[n, c, a, b], plus bias[o].
std::vector<double> naive_conv_transpose2d(const std::vector<double>& x, const Shape& xs, const std::vector<double>& w,
                                           const std::vector<double>& bias, const ConvParams& q, const Shape& ys) {
  const std::int64_t N = xs[0], C = xs[1], H = xs[2], W = xs[3], Ho = ys[2], Wo = ys[3], k = q.kernel;
  std::vector<double> y(static_cast<std::size_t>(N * q.out * Ho * Wo));
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t o = 0; o < q.out; ++o)
      for (std::int64_t pixel = 0; pixel < Ho * Wo; ++pixel) y[(n * q.out + o) * Ho * Wo + pixel] = bias[o];
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t c = 0; c < C; ++c)
      for (std::int64_t a = 0; a < H; ++a)
        for (std::int64_t b = 0; b < W; ++b)
          for (std::int64_t o = 0; o < q.out; ++o)
            for (std::int64_t i = 0; i < k; ++i)
              for (std::int64_t j = 0; j < k; ++j) {
                const std::int64_t row = a * q.stride - q.padding + i, col = b * q.stride - q.padding + j;
                if (row < 0 || row >= Ho || col < 0 || col >= Wo) continue;
                y[((n * q.out + o) * Ho + row) * Wo + col] +=
                    w[((c * q.out + o) * k + i) * k + j] * x[((n * C + c) * H + a) * W + b];
              }
  return y;
}

json conv_json(const ConvParams& q, bool transposed) {
  json params{{"out_channels", q.out}, {"kernel", q.kernel}, {"stride", q.stride}, {"padding", q.padding}};
  if (transposed) params["output_padding"] = q.output_padding;
  return params;
}

void expect_conv2d_blocks_right(const ConvParams& q, const Shape& input_shape) {
  const double bound = 0.3;
  LayerRun run("Conv2d", conv_json(q, false), input_shape, -bound, bound);
  const std::vector<double> reference =
      naive_conv2d(run.x.to_values(), input_shape, run.parameter("weight"), run.parameter("bias"), q, run.output_shape);
  expect_blocks_right(run, reference, 1e-5);
}

void expect_conv_transpose2d_blocks_right(const ConvParams& q, const Shape& input_shape) {
  const double bound = 0.3;
  LayerRun run("ConvTranspose2d", conv_json(q, true), input_shape, -bound, bound);
  const std::vector<double> reference = naive_conv_transpose2d(run.x.to_values(), input_shape, run.parameter("weight"),
                                                               run.parameter("bias"), q, run.output_shape);
  expect_blocks_right(run, reference, 1e-5);
}

// Output 38 x 27: several blocks of rows per image, the last one short.
TEST(CpuThreadsWithinImage, Conv2dStride2Padding2) { expect_conv2d_blocks_right({6, 5, 2, 2, 0}, {2, 5, 75, 53}); }

// Stride 1, a wide image (one row per block), and a 1x1 kernel.
TEST(CpuThreadsWithinImage, Conv2dStride1AndOneByOne) {
  expect_conv2d_blocks_right({4, 3, 1, 1, 0}, {1, 3, 23, 301});
  expect_conv2d_blocks_right({7, 1, 1, 0, 0}, {2, 5, 31, 17});
}

// Output 90 x 26: blocks of image rows that share patch rows (the halo).
TEST(CpuThreadsWithinImage, ConvTranspose2dStride2Padding2) {
  expect_conv_transpose2d_blocks_right({6, 5, 2, 2, 1}, {2, 7, 45, 13});
}

// Stride 1 (a halo of k - 1 rows), and stride 3 > kernel 2, where some
// output rows (and the output padding's) receive only the bias.
TEST(CpuThreadsWithinImage, ConvTranspose2dStride1AndStrideAboveKernel) {
  expect_conv_transpose2d_blocks_right({4, 3, 1, 1, 0}, {1, 5, 47, 11});
  expect_conv_transpose2d_blocks_right({3, 2, 3, 0, 2}, {2, 4, 41, 9});
}

// GDN: y = x / sqrt(beta + gamma x^2) per pixel; IGDN: y = x * sqrt(...), with
// beta and gamma stored reparametrised: value = stored^2 - offset^2 (the
// stored values here are above the lower bounds).
std::vector<double> naive_gdn(const std::vector<double>& x, const Shape& shape, const std::vector<double>& beta,
                              const std::vector<double>& gamma, bool inverse) {
  const double pedestal = 3.814697265625e-06 * 3.814697265625e-06;
  const std::int64_t N = shape[0], C = shape[1], P = shape[2] * shape[3];
  std::vector<double> y(x.size());
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t q = 0; q < P; ++q)
      for (std::int64_t i = 0; i < C; ++i) {
        double norm = beta[i] * beta[i] - pedestal;
        for (std::int64_t j = 0; j < C; ++j) {
          const double xj = x[(n * C + j) * P + q];
          norm += (gamma[i * C + j] * gamma[i * C + j] - pedestal) * xj * xj;
        }
        const double xi = x[(n * C + i) * P + q];
        y[(n * C + i) * P + q] = inverse ? xi * std::sqrt(norm) : xi / std::sqrt(norm);
      }
  return y;
}

// 37 x 61 = 2257 pixels: blocks of pixels, the last one short.
TEST(CpuThreadsWithinImage, GdnAndIgdn) {
  const Shape shape{2, 9, 37, 61};
  for (const bool inverse : {false, true}) {
    LayerRun run(inverse ? "IGDN" : "GDN", json::object(), shape, 0.05, 0.6);
    const std::vector<double> reference =
        naive_gdn(run.x.to_values(), shape, run.parameter("beta"), run.parameter("gamma"), inverse);
    SCOPED_TRACE(inverse ? "IGDN" : "GDN");
    expect_blocks_right(run, reference, 1e-5);
  }
}

}  // namespace
}  // namespace plexus::within_image_test

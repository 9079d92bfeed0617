// The CPU kernels spread a batch over threads (plexus/cpu_parallel.h): the
// results must be bit-identical for 1 and several threads, and parallel_for
// must run every item exactly once and pass exceptions on.
#include <gtest/gtest.h>

#include <atomic>
#include <random>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "plexus/builtin_layers.h"
#include "plexus/cpu_parallel.h"
#include "plexus/registry.h"

namespace plexus {
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

TEST(CpuThreads, ZeroMeansEveryCore) {
  ThreadCountGuard guard;
  set_cpu_threads(0);
  EXPECT_GE(cpu_threads(), 1);
  set_cpu_threads(3);
  EXPECT_EQ(cpu_threads(), 3);
}

}  // namespace
}  // namespace plexus

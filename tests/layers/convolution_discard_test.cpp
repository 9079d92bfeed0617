// Conv2d and ConvTranspose2d told to discard their input
// (Layer::set_discard_input) give the memory of the rows they have read back
// to the system as they go: on inputs large enough to be mapped buffers
// (host_memory.h), with one and two images, strides 1 and 2, and 1, 2 and 3
// threads, the outputs must be bit-identical to those of a forward that
// keeps its input, and memory must have been given back.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include <nlohmann/json.hpp>

#include "plexus/builtin_layers.h"
#include "plexus/cpu_parallel.h"
#include "plexus/host_memory.h"

namespace plexus {
namespace {

using nlohmann::json;

const Registry registry = builtin_registry();

struct ThreadCountGuard {
  ~ThreadCountGuard() { set_cpu_threads(0); }
};

Tensor random_tensor(const Shape& shape, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  std::vector<double> values(static_cast<std::size_t>(shape_numel(shape)));
  for (auto& v : values) v = uniform(rng);
  return Tensor::from_values(values, shape);
}

void expect_same_with_discard(const std::string& type, const json& params, const Shape& input_shape) {
  ASSERT_GE(shape_numel(input_shape) * sizeof(float), host_memory::kMappedHostBytes);
  auto layer = registry.create(type, "conv", params);
  const Shape output_shape = layer->output_shapes({input_shape})[0];
  layer->create_parameters({input_shape});
  std::mt19937_64 rng(3);
  layer->initialize_parameters(DType::f32, Device::cpu(), rng);
  const Tensor input = random_tensor(input_shape, 4);
  Context ctx;
  Tensor expected(output_shape);
  layer->forward(ctx, {&input}, {&expected});
  ThreadCountGuard guard;
  for (const int threads : {1, 2, 3}) {
    set_cpu_threads(threads);
    Tensor consumed = input.clone();
    Tensor actual(output_shape);
    const std::size_t before = host_memory::discarded_bytes();
    layer->set_discard_input(true);
    layer->forward(ctx, {&consumed}, {&actual});
    layer->set_discard_input(false);
    EXPECT_GT(host_memory::discarded_bytes() - before, consumed.nbytes() / 2) << type << " " << threads << " threads";
    ASSERT_EQ(std::memcmp(expected.raw_data(), actual.raw_data(), expected.nbytes()), 0)
        << type << " " << params.dump() << " " << shape_str(input_shape) << ", " << threads << " threads";
  }
}

TEST(ConvolutionDiscard, Conv2dStride1) {
  expect_same_with_discard("Conv2d", {{"out_channels", 4}, {"kernel", 3}, {"padding", 1}}, {1, 8, 1030, 1020});
}

TEST(ConvolutionDiscard, Conv2dStride2TwoImages) {
  expect_same_with_discard("Conv2d", {{"out_channels", 4}, {"kernel", 5}, {"stride", 2}, {"padding", 2}},
                           {2, 4, 1031, 1021});
}

TEST(ConvolutionDiscard, ConvTranspose2dStride2) {
  expect_same_with_discard("ConvTranspose2d",
                           {{"out_channels", 3}, {"kernel", 5}, {"stride", 2}, {"padding", 2}, {"output_padding", 1}},
                           {1, 16, 700, 760});
}

TEST(ConvolutionDiscard, ConvTranspose2dStride1TwoImages) {
  expect_same_with_discard("ConvTranspose2d", {{"out_channels", 3}, {"kernel", 3}, {"padding", 1}}, {2, 8, 530, 1010});
}

}  // namespace
}  // namespace plexus

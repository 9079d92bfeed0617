// Forward time of the sparse transposed convolutions against Plexus's dense
// ConvTranspose2d at the three bls2017 decoder shapes (a 768x512 image:
// latent 48x32), batch 1 and 16, f32, at weight sparsity 0/50/80/90/95%.
// Weights: uniform random, the smallest magnitudes zeroed (prune_by_magnitude).
// Each forward is timed alone with CUDA events on the context's stream,
// after 3 warm-up calls; the median of --repeats is reported. One JSON line
// per measurement on stdout:
//   {"layer","batch","sparsity","kernel","ms","useful_gflop","bytes","nonzeros"}
// kernel: "dense-f32" (built-in, strict f32), "dense-tf32" (built-in, TF32
// tensor cores), both at sparsity 0 only (their time does not depend on the
// zeros); "rows", "coo" at 50/80/90/95%. useful_gflop: 2 * non-zeros * the source
// pixels each meets (dense: all weights). bytes: the minimum a kernel must
// move: input + output + its weights in its own format.
//
// usage: sparse_conv_bench PLUGIN.so [--repeats N]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "plexus/builtin_layers.h"
#include "plexus/cuda/cuda_check.h"
#include "plexus/cuda/cuda_context.h"
#include "plexus/plugin.h"
#include "plexus/registry.h"
#include "pruning_schedule.h"
#include "sparse_filter.h"

namespace {

struct LayerShape {
  const char* name;
  int in_channels, out_channels, kernel, stride, padding, output_padding, height, width;  // input size
};

// bls2017's synthesis transform on a 768x512 image (latent 48x32).
const LayerShape kDecoder[] = {
    {"g_s0", 128, 128, 5, 2, 2, 1, 32, 48},
    {"g_s1", 128, 128, 5, 2, 2, 1, 64, 96},
    {"g_s2", 128, 3, 9, 4, 4, 3, 128, 192},
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Milliseconds of one forward of `layer`, timed with CUDA events on its stream.
double one_forward(plexus::Layer& layer, plexus::Context& ctx, const plexus::Tensor& x, plexus::Tensor& y,
                   cudaEvent_t start, cudaEvent_t stop) {
  cudaStream_t stream = plexus::cuda::stream(ctx);
  plexus::cuda::check_cuda(cudaEventRecord(start, stream), "cudaEventRecord", __FILE__, __LINE__);
  layer.forward(ctx, {&x}, {&y});
  plexus::cuda::check_cuda(cudaEventRecord(stop, stream), "cudaEventRecord", __FILE__, __LINE__);
  plexus::cuda::check_cuda(cudaEventSynchronize(stop), "cudaEventSynchronize", __FILE__, __LINE__);
  float elapsed = 0;
  plexus::cuda::check_cuda(cudaEventElapsedTime(&elapsed, start, stop), "cudaEventElapsedTime", __FILE__, __LINE__);
  return elapsed;
}

// Median milliseconds of up to `repeats` forwards after 3 warm-up calls
// (which build and upload a sparse filter, or pick a dense algorithm); a
// slow kernel gets fewer repeats (about 0.5 s worth), at least 3.
double time_forward(plexus::Layer& layer, plexus::Context& ctx, const plexus::Tensor& x, plexus::Tensor& y,
                    int repeats) {
  cudaEvent_t start, stop;
  plexus::cuda::check_cuda(cudaEventCreate(&start), "cudaEventCreate", __FILE__, __LINE__);
  plexus::cuda::check_cuda(cudaEventCreate(&stop), "cudaEventCreate", __FILE__, __LINE__);
  double warm_ms = 0;
  for (int i = 0; i < 3; ++i) warm_ms = one_forward(layer, ctx, x, y, start, stop);
  repeats = std::max(3, std::min(repeats, static_cast<int>(500.0 / std::max(warm_ms, 1e-3))));
  std::vector<double> ms;
  for (int i = 0; i < repeats; ++i) ms.push_back(one_forward(layer, ctx, x, y, start, stop));
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return median(ms);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s PLUGIN.so [--repeats N]\n", argv[0]);
    return 2;
  }
  int repeats = 20;
  for (int i = 2; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--repeats") == 0) repeats = std::max(1, std::atoi(argv[i + 1]));
  try {
    if (!plexus::cuda_available()) throw plexus::DeviceError("the benchmark needs a CUDA GPU, and none is visible");
    plexus::Registry registry = plexus::builtin_registry();
    plexus::load_plugin(argv[1], registry);
    const plexus::Device gpu = plexus::Device::cuda();
    for (const LayerShape& s : kDecoder) {
      const nlohmann::json conv{{"out_channels", s.out_channels},
                                {"kernel", s.kernel},
                                {"stride", s.stride},
                                {"padding", s.padding},
                                {"output_padding", s.output_padding}};
      // Weights [in, out, k, k], uniform; magnitudes pruned per sparsity below.
      std::mt19937_64 rng(1);
      std::uniform_real_distribution<double> u(-0.1, 0.1);
      std::vector<double> dense_weight(static_cast<std::size_t>(s.in_channels) * s.out_channels * s.kernel * s.kernel);
      for (double& w : dense_weight) w = u(rng);
      for (int batch : {1, 16}) {
        const plexus::Shape input{batch, s.in_channels, s.height, s.width};
        std::vector<double> x_values(static_cast<std::size_t>(plexus::shape_numel(input)));
        for (double& v : x_values) v = u(rng);
        plexus::Tensor x = plexus::Tensor::from_values(x_values, input, plexus::DType::f32, gpu);
        for (double sparsity : {0.0, 0.5, 0.8, 0.9, 0.95}) {
          std::vector<double> mask(dense_weight.size(), 1.0);
          sparse_conv::prune_by_magnitude(dense_weight, mask, sparsity);
          std::vector<double> weight = dense_weight;
          for (std::size_t i = 0; i < weight.size(); ++i) weight[i] *= mask[i];
          const std::int64_t nonzeros = std::count_if(weight.begin(), weight.end(), [](double w) { return w != 0; });
          const std::vector<std::pair<std::string, std::string>> kernels{{"dense-f32", "ConvTranspose2d"},
                                                                         {"dense-tf32", "ConvTranspose2d"},
                                                                         {"rows", "SparseConvTranspose2d"},
                                                                         {"coo", "SparseConvTranspose2d"}};
          for (const auto& [kernel, type] : kernels) {
            const bool dense_kernel = kernel.rfind("dense", 0) == 0;
            if (dense_kernel != (sparsity == 0.0)) continue;  // dense timing does not depend on the zeros
            nlohmann::json params = conv;
            if (kernel == "rows" || kernel == "coo") params["format"] = kernel;
            auto layer = registry.create(type, s.name, params);
            const plexus::Shape output = layer->output_shapes({input})[0];
            layer->create_parameters({input});
            std::mt19937_64 unused(0);
            layer->initialize_parameters(plexus::DType::f32, gpu, unused);
            layer->parameter("weight").value.copy_from(
                plexus::Tensor::from_values(weight, layer->parameter("weight").shape, plexus::DType::f32));
            plexus::Tensor y(output, plexus::DType::f32, gpu);
            plexus::Context ctx(gpu, 1);
            ctx.set_training(false);
            ctx.set_precision(kernel == "dense-tf32" ? plexus::Precision::tf32 : plexus::Precision::f32);
            const double ms = time_forward(*layer, ctx, x, y, repeats);
            const bool dense = dense_kernel;
            const std::int64_t counted = dense ? static_cast<std::int64_t>(weight.size()) : nonzeros;
            const double useful_gflop = 2.0 * counted * batch * s.height * s.width / 1e9;
            const std::int64_t weight_bytes =
                dense ? static_cast<std::int64_t>(weight.size()) * 4
                      : (kernel == "rows" ? sparse_conv::rows_bytes(nonzeros, s.out_channels * s.stride * s.stride, 4)
                                          : sparse_conv::coo_bytes(nonzeros, 4));
            const std::int64_t bytes = (plexus::shape_numel(input) + plexus::shape_numel(output)) * 4 + weight_bytes;
            nlohmann::json row{{"layer", s.name},
                               {"batch", batch},
                               {"sparsity", sparsity},
                               {"kernel", kernel},
                               {"ms", ms},
                               {"useful_gflop", useful_gflop},
                               {"bytes", bytes},
                               {"nonzeros", nonzeros}};
            std::printf("%s\n", row.dump().c_str());
            std::fflush(stdout);
          }
        }
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}

// softmax-gemm-bench: whether SoftmaxProjection's weight needs a padded copy.
// Times the three cuBLAS products of the layer (plexus::cuda::gemm) at the
// classic shape, N = 5120, F = 1024, V = 33708 (V_pad = 33712), in the
// layouts it could use, one JSON line per variant on stdout:
//   z  [N, V] = f W^T   into a [N, V] buffer; into the first V columns of a
//                       [N, V_pad] buffer (what the layer does); or all V_pad
//                       columns from a padded weight copy [V_pad, F]
//   df [N, F] = dz W    dz with row stride V or V_pad (k = V), or k = V_pad
//                       against the padded weight copy
//   dW [V, F] = dz^T f  dz with row stride V or V_pad, or all V_pad rows
// plus the copy of W into its padded buffer, which the padded variants would
// pay on every call (the weight changes every step). At bf16 each product
// includes the rounding of its two operands to bf16 copies (cuda::gemm).
//   softmax-gemm-bench [--precision f32,tf32,bf16] [--repeats R]
// Timing: CUDA events, 3 untimed calls, then the median of R (lab/bench/event_timer.h).
#include <iostream>
#include <random>
#include <sstream>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "event_timer.h"
#include "plexus/cuda/blas.h"

using namespace plexus;

namespace {

Tensor random_matrix(std::int64_t rows, std::int64_t columns, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  std::vector<double> values(static_cast<std::size_t>(rows * columns));
  for (auto& v : values) v = dist(rng);
  return Tensor::from_values(values, {rows, columns}, DType::f32, Device::cuda(0));
}

void time_variants(Precision precision, int repeats) {
  const int n = 5120, f = 1024, v = 33708, v_pad = (v + 7) / 8 * 8;
  Context ctx(Device::cuda(0), 1);
  ctx.set_precision(precision);
  std::mt19937_64 rng(1);
  Tensor features = random_matrix(n, f, rng), weight = random_matrix(v, f, rng);
  Tensor dz = random_matrix(n, v_pad, rng);                       // read with row stride V or V_pad
  Tensor padded_weight({v_pad, f}, DType::f32, Device::cuda(0));  // rows >= V stay zero
  Tensor z({n, v_pad}, DType::f32, Device::cuda(0)), df({n, f}, DType::f32, Device::cuda(0));
  Tensor dw({v_pad, f}, DType::f32, Device::cuda(0));
  const float* x = features.data<float>();
  const float* w = weight.data<float>();
  const float* wp = padded_weight.data<float>();
  const float* g = dz.data<float>();
  bench::EventTimer timer;
  auto report = [&](const std::string& name, double columns, auto&& fn) {
    const double ms = timer.median_ms(ctx, 3, repeats, fn);
    const double flops = columns > 0 ? 2.0 * n * double(f) * columns : 0.0;
    std::cout << nlohmann::json{{"kind", "gemm_variant"},
                                {"precision", precision_name(precision)},
                                {"name", name},
                                {"ms", ms},
                                {"tflops", flops / ms / 1e9}}
                     .dump()
              << std::endl;
  };
  report("z = f W^T, z stride V", v,
         [&] { cuda::gemm<float>(ctx, false, true, n, v, f, 1.0f, x, f, w, f, 0.0f, z.data<float>(), v); });
  report("z = f W^T, z stride V_pad (the layer)", v,
         [&] { cuda::gemm<float>(ctx, false, true, n, v, f, 1.0f, x, f, w, f, 0.0f, z.data<float>(), v_pad); });
  report("z = f Wpad^T, V_pad columns (padded weight)", v_pad,
         [&] { cuda::gemm<float>(ctx, false, true, n, v_pad, f, 1.0f, x, f, wp, f, 0.0f, z.data<float>(), v_pad); });
  report("copy W into the padded weight", 0, [&] {
    cuda::check_cuda(cudaMemcpyAsync(padded_weight.raw_data(), weight.raw_data(), weight.nbytes(),
                                     cudaMemcpyDeviceToDevice, cuda::stream(ctx)),
                     "cudaMemcpyAsync", __FILE__, __LINE__);
  });
  report("df = dz W, dz stride V", v,
         [&] { cuda::gemm<float>(ctx, false, false, n, f, v, 1.0f, g, v, w, f, 0.0f, df.data<float>(), f); });
  report("df = dz W, dz stride V_pad (the layer)", v,
         [&] { cuda::gemm<float>(ctx, false, false, n, f, v, 1.0f, g, v_pad, w, f, 0.0f, df.data<float>(), f); });
  report("df = dz Wpad, k = V_pad (padded weight)", v_pad,
         [&] { cuda::gemm<float>(ctx, false, false, n, f, v_pad, 1.0f, g, v_pad, wp, f, 0.0f, df.data<float>(), f); });
  report("dW = dz^T f, dz stride V", v,
         [&] { cuda::gemm<float>(ctx, true, false, v, f, n, 1.0f, g, v, x, f, 1.0f, dw.data<float>(), f); });
  report("dW = dz^T f, dz stride V_pad (the layer)", v,
         [&] { cuda::gemm<float>(ctx, true, false, v, f, n, 1.0f, g, v_pad, x, f, 1.0f, dw.data<float>(), f); });
  report("dWpad = dz^T f, V_pad rows (padded weight)", v_pad,
         [&] { cuda::gemm<float>(ctx, true, false, v_pad, f, n, 1.0f, g, v_pad, x, f, 1.0f, dw.data<float>(), f); });
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"softmax-gemm-bench: SoftmaxProjection's products with and without a padded weight (JSON lines)"};
  std::string precisions = "f32,tf32,bf16";
  int repeats = 20;
  app.add_option("--precision", precisions, "comma-separated list of f32, tf32, bf16")->capture_default_str();
  app.add_option("--repeats", repeats, "timed runs; the median is reported")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    if (!cuda_available()) throw DeviceError("softmax-gemm-bench needs a CUDA GPU, and none is visible");
    std::stringstream list(precisions);
    for (std::string item; std::getline(list, item, ',');) time_variants(parse_precision(item), repeats);
  } catch (const std::exception& e) {
    std::cerr << "softmax-gemm-bench: " << e.what() << "\n";
    return 1;
  }
  return 0;
}

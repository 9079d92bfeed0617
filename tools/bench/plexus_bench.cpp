// plexus-bench: GPU timings of every built-in layer at the autoencoder's
// shapes and of whole training steps, one JSON object per line on stdout.
// The cases come from tools/bench/bench_cases.json, which torch_bench.py
// reads too, so both sides time the same work. Timing: CUDA events on the
// context's stream, `--warmup` untimed runs, then the median of `--repeats`.
//   plexus-bench --cases tools/bench/bench_cases.json [--precision f32|tf32|bf16] [--only TEXT]
// Each line also carries the precision and, for convolutions, the FLOPs of
// one pass (2*N*Cout*Hout*Wout*Cin*k*k; backward is two passes: input and
// weight gradients), so compare.py can print achieved TFLOP/s.
#include <cuda_runtime.h>

#include <algorithm>
#include <fstream>
#include <iostream>
#include <random>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "plexus/cuda/cuda_check.h"
#include "plexus/cuda/cuda_context.h"
#include "plexus/net.h"
#include "plexus/optimizer.h"
#include "plexus/registry.h"

using namespace plexus;
using nlohmann::json;

namespace {

struct Timer {
  cudaEvent_t start{}, stop{};
  Timer() {
    cuda::check_cuda(cudaEventCreate(&start), "cudaEventCreate", __FILE__, __LINE__);
    cuda::check_cuda(cudaEventCreate(&stop), "cudaEventCreate", __FILE__, __LINE__);
  }
  ~Timer() {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
  }
  // Median milliseconds of `repeats` timed calls of fn after `warmup` untimed ones.
  template <typename Fn>
  double median_ms(Context& ctx, int warmup, int repeats, Fn&& fn) {
    for (int i = 0; i < warmup; ++i) fn();
    std::vector<double> times;
    for (int i = 0; i < repeats; ++i) {
      cuda::check_cuda(cudaEventRecord(start, cuda::stream(ctx)), "cudaEventRecord", __FILE__, __LINE__);
      fn();
      cuda::check_cuda(cudaEventRecord(stop, cuda::stream(ctx)), "cudaEventRecord", __FILE__, __LINE__);
      cuda::check_cuda(cudaEventSynchronize(stop), "cudaEventSynchronize", __FILE__, __LINE__);
      float ms = 0;
      cuda::check_cuda(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime", __FILE__, __LINE__);
      times.push_back(ms);
    }
    std::sort(times.begin(), times.end());
    return times[times.size() / 2];
  }
};

Tensor random_tensor(const Shape& shape, double low, double high, std::mt19937_64& rng, Device device) {
  std::uniform_real_distribution<double> dist(low, high);
  std::vector<double> values(static_cast<std::size_t>(shape_numel(shape)));
  for (auto& v : values) v = dist(rng);
  return Tensor::from_values(values, shape, DType::f32, device);
}

// FLOPs of one pass of a Conv2d / ConvTranspose2d case (multiply and add
// counted separately), or 0 for other layers. A ConvTranspose2d is the Conv2d
// from its output to its input, so the same formula with the roles swapped.
double conv_pass_flops(const json& c, const std::vector<Shape>& inputs, const std::vector<Shape>& outputs) {
  const std::string type = c["type"];
  if (type != "Conv2d" && type != "ConvTranspose2d") return 0.0;
  const double k = c["params"]["kernel"].get<double>();
  const Shape& x = inputs[0];
  const Shape& y = outputs[0];
  const Shape& small = type == "Conv2d" ? y : x;  // the side with one pixel per kernel position
  const Shape& large = type == "Conv2d" ? x : y;
  return 2.0 * static_cast<double>(small[0]) * static_cast<double>(small[1]) * static_cast<double>(small[2]) *
         static_cast<double>(small[3]) * static_cast<double>(large[1]) * k * k;
}

json time_layer(const Registry& registry, const json& c, Precision precision, int warmup, int repeats) {
  const Device gpu = Device::cuda(0);
  std::vector<Shape> input_shapes;
  for (const auto& s : c["inputs"]) input_shapes.push_back(s.get<Shape>());
  auto layer = registry.create(c["type"], "bench", c["params"]);
  auto output_shapes = layer->output_shapes(input_shapes);
  layer->create_parameters(input_shapes);
  std::mt19937_64 rng(1);
  layer->initialize_parameters(DType::f32, gpu, rng);
  Context ctx(gpu, 1);
  ctx.set_precision(precision);
  int positive = c.value("positive_input", -1);
  std::vector<Tensor> inputs, outputs, output_grads, input_grads;
  for (std::size_t i = 0; i < input_shapes.size(); ++i)
    inputs.push_back(static_cast<int>(i) == positive ? random_tensor(input_shapes[i], 0.01, 1.0, rng, gpu)
                                                     : random_tensor(input_shapes[i], -1.0, 1.0, rng, gpu));
  for (const auto& s : output_shapes) {
    outputs.emplace_back(s, DType::f32, gpu);
    output_grads.push_back(random_tensor(s, -1.0, 1.0, rng, gpu));
  }
  ConstTensors in, out, dout;
  MutableTensors out_mutable, din;
  for (auto& t : inputs) in.push_back(&t);
  for (auto& t : outputs) {
    out.push_back(&t);
    out_mutable.push_back(&t);
  }
  for (auto& t : output_grads) dout.push_back(&t);
  for (std::size_t i = 0; i < inputs.size(); ++i)
    input_grads.push_back(layer->input_is_differentiable(static_cast<int>(i)) ? Tensor(input_shapes[i], DType::f32, gpu)
                                                                             : Tensor());
  for (auto& t : input_grads) din.push_back(t.defined() ? &t : nullptr);
  Timer timer;
  double forward_ms = timer.median_ms(ctx, warmup, repeats, [&] { layer->forward(ctx, in, out_mutable); });
  layer->forward(ctx, in, out_mutable);
  double backward_ms = timer.median_ms(ctx, warmup, repeats, [&] { layer->backward(ctx, in, out, dout, din); });
  return {{"kind", "layer"},
          {"name", c["name"]},
          {"forward_ms", forward_ms},
          {"backward_ms", backward_ms},
          {"pass_flops", conv_pass_flops(c, input_shapes, output_shapes)}};
}

json time_model(const Registry& registry, const json& m, const std::string& root, Precision precision, int warmup,
                int repeats) {
  const Device gpu = Device::cuda(0);
  ModelSpec spec = ModelSpec::from_file(root + "/" + m["spec"].get<std::string>());
  std::int64_t batch = m["batch"], patch = m["patch"];
  Net net(spec, registry, {{"image", {batch, 3, patch, patch}}}, DType::f32, gpu, 1);
  Context ctx(gpu, 1);
  ctx.set_precision(precision);
  ctx.set_training(true);
  std::mt19937_64 rng(2);
  net.input("image").copy_from(random_tensor({batch, 3, patch, patch}, 0.0, 1.0, rng, gpu));
  Adam adam(1e-4);
  double lambda = m["lambda"];
  auto params = net.parameters();
  Timer timer;
  double step_ms = timer.median_ms(ctx, warmup, repeats, [&] {
    net.zero_grad();
    net.forward(ctx);
    net.backward(ctx, {{"mse", lambda * 255.0 * 255.0}, {"bpp", 1.0}});
    adam.step(ctx, params);
  });
  return {{"kind", "train_step"}, {"name", m["name"]}, {"step_ms", step_ms},
          {"images_per_s", 1000.0 * static_cast<double>(batch) / step_ms}};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"plexus-bench: GPU timings of Plexus layers and training steps (JSON lines on stdout)"};
  std::string cases_path = "tools/bench/bench_cases.json", root = ".", only;
  bool tf32_alias = false;
  std::string precision = "f32";
  int warmup = 5, repeats = 20;
  app.add_option("--cases", cases_path, "benchmark cases file")->capture_default_str();
  app.add_option("--root", root, "repository root, for model spec paths")->capture_default_str();
  app.add_option("--warmup", warmup, "untimed runs before timing")->capture_default_str();
  app.add_option("--repeats", repeats, "timed runs; the median is reported")->capture_default_str();
  app.add_option("--only", only, "run only cases whose name contains this text");
  app.add_option("--precision", precision,
                 "f32 (strict), tf32 (f32 storage, TF32 tensor-core products) or bf16; PyTorch's default "
                 "allows TF32 in cuDNN convolutions")
      ->check(CLI::IsMember({"f32", "tf32", "bf16"}))
      ->capture_default_str();
  app.add_flag("--tf32", tf32_alias, "deprecated: same as --precision tf32");
  CLI11_PARSE(app, argc, argv);
  if (tf32_alias) precision = "tf32";
  try {
    const Precision policy = parse_precision(precision);
    Context(Device::cpu()).set_precision(policy);  // rejects a policy this build lacks before any timing
    if (!cuda_available()) throw DeviceError("plexus-bench needs a CUDA GPU, and none is visible");
    std::ifstream file(cases_path);
    if (!file) throw IoError("cannot open benchmark cases '" + cases_path + "'");
    json cases = json::parse(file);
    Registry registry = builtin_registry();
    for (const auto& c : cases["layers"]) {
      if (!only.empty() && c["name"].get<std::string>().find(only) == std::string::npos) continue;
      json row = time_layer(registry, c, policy, warmup, repeats);
      row["precision"] = precision;
      std::cout << row.dump() << std::endl;
    }
    for (const auto& m : cases["models"]) {
      if (!only.empty() && m["name"].get<std::string>().find(only) == std::string::npos) continue;
      json row = time_model(registry, m, root, policy, warmup, std::max(5, repeats / 2));
      row["precision"] = precision;
      std::cout << row.dump() << std::endl;
    }
  } catch (const std::exception& e) {
    std::cerr << "plexus-bench: " << e.what() << "\n";
    return 1;
  }
  return 0;
}

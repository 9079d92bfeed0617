// plexus-bench: GPU timings of every built-in layer at the autoencoder's
// shapes and of whole training steps, one JSON object per line on stdout.
// The cases come from lab/bench/bench_cases.json, which torch_bench.py
// reads too, so both sides time the same work. Timing: CUDA events on the
// context's stream, `--warmup` untimed runs, then the median of `--repeats`.
//   plexus-bench --cases lab/bench/bench_cases.json [--precision f32|tf32|bf16] [--only TEXT] [--models]
// A model case's "spec" is a path or the spec itself; "step_loss": "mse" makes
// it a one-layer step (see layers_v2_cases.json). --check builds the model
// cases on the CPU and times nothing.
// Each line also carries the precision and, for convolutions and
// SoftmaxProjection, the FLOPs of one pass (2*N*Cout*Hout*Wout*Cin*k*k,
// 2*N*F*V; backward is two passes: input and weight gradients), so
// compare.py can print achieved TFLOP/s.
// Every model row also carries "peak_bytes", the step's peak device memory
// (see PeakMemory). Each model also gets a "train_step_graph" row: the same step recorded once
// into a CUDA graph (plexus/step_graph.h) and replayed. `--profile` adds,
// per model, one row per node (CUDA events around its forward and backward,
// also NVTX ranges for Nsight Systems) with its FLOP and byte floors, and
// the measured ceilings those floors use (see docs/performance.md).
// `--timeline FILE` writes every kernel, memset and copy of a few replays of
// each model's CUDA-graph step with its stream and times (kernel_timeline.h), to see
// which kernels run alone and which beside others.
#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>

#include <algorithm>
#include <fstream>
#include <iostream>
#include <random>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "event_timer.h"
#include "kernel_timeline.h"
#include "plexus/builtin_layers.h"
#include "plexus/codec/autoencoder_contract.h"
#include "plexus/cuda/blas.h"
#include "plexus/cuda/cuda_check.h"
#include "plexus/cuda/cuda_context.h"
#include "plexus/flop_count.h"
#include "plexus/net.h"
#include "plexus/optimizer.h"
#include "plexus/registry.h"
#include "plexus/step_graph.h"

using namespace plexus;
using nlohmann::json;

namespace {

using Timer = bench::EventTimer;

Tensor random_tensor(const Shape& shape, double low, double high, std::mt19937_64& rng, Device device) {
  std::uniform_real_distribution<double> dist(low, high);
  std::vector<double> values(static_cast<std::size_t>(shape_numel(shape)));
  for (auto& v : values) v = dist(rng);
  return Tensor::from_values(values, shape, DType::f32, device);
}

// FLOPs of one pass of a case (multiply and add counted separately;
// backward is two passes), or 0 for layers without a matrix product: the
// framework's per-node count (plexus/flop_count.h), which states the formulas.
double pass_flops(const json& c, const std::vector<Shape>& inputs, const std::vector<Shape>& outputs) {
  return forward_flops(c["type"], c.value("params", json::object()), inputs, outputs).value_or(0.0);
}

// Integer class labels in [0, classes), stored as floats (SoftmaxProjection's labels).
Tensor random_labels(const Shape& shape, std::int64_t classes, std::mt19937_64& rng, Device device) {
  std::uniform_int_distribution<std::int64_t> pick(0, classes - 1);
  std::vector<double> values(static_cast<std::size_t>(shape_numel(shape)));
  for (auto& v : values) v = static_cast<double>(pick(rng));
  return Tensor::from_values(values, shape, DType::f32, device);
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
  int labels = c.value("labels_input", -1);  // integer labels in [0, params.vocab_size)
  std::vector<Tensor> inputs, outputs, output_grads, input_grads;
  for (std::size_t i = 0; i < input_shapes.size(); ++i) {
    const int index = static_cast<int>(i);
    inputs.push_back(index == labels     ? random_labels(input_shapes[i], c["params"]["vocab_size"], rng, gpu)
                     : index == positive ? random_tensor(input_shapes[i], 0.01, 1.0, rng, gpu)
                                         : random_tensor(input_shapes[i], -1.0, 1.0, rng, gpu));
  }
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
    input_grads.push_back(layer->traits(gpu).input_is_differentiable(static_cast<int>(i))
                              ? Tensor(input_shapes[i], DType::f32, gpu)
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
          {"pass_flops", pass_flops(c, input_shapes, output_shapes)}};
}

struct ModelCase {
  std::unique_ptr<Net> net;
  std::unique_ptr<Context> ctx;
  Adam adam{1e-4};
  std::vector<NamedParameter> params;
  // {"mse": lambda * 255^2, "bpp": 1}, as in plexus-ae train; a one-layer case ("step_loss": "mse") has no rate.
  std::map<std::string, double> loss_weights;
  void step() {
    net->zero_grad();
    net->forward(*ctx);
    net->backward(*ctx, loss_weights);
    adam.step(*ctx, params);
  }
  // The same step, recorded into `graph` once and replayed; the optimiser's
  // host half runs outside the graph as in plexus-ae train.
  void graph_step(StepGraph& graph) {
    adam.begin_step(*ctx, params);
    graph.run(*ctx, net->layout_version(), [&] {
      net->zero_grad();
      net->forward(*ctx);
      net->backward(*ctx, loss_weights);
      adam.apply(*ctx, params);
    });
  }
};

// The loss lambda of a case: "lambda", or for a variable-rate model the mean
// of its "lambdas" (what plexus-ae train weights "mse" by).
double case_lambda(const json& m) {
  if (m.contains("lambdas")) return codec::variable_rate_lambda(m["lambdas"].get<std::vector<double>>());
  return m["lambda"].get<double>();
}

// A case whose loss is its spec's "mse" alone ("step_loss": "mse"): a
// one-layer spec reading "image" of [batch, channels, patch, patch], not a
// codec, so the autoencoder contract does not apply.
bool layer_step(const json& m) { return m.value("step_loss", "") == "mse"; }

// The spec of a case: "spec" a path under the repository root, or the spec itself (an object).
ModelSpec case_spec(const json& m, const std::string& root) {
  if (m.at("spec").is_object()) return ModelSpec::from_json(m["spec"], "case '" + m["name"].get<std::string>() + "'");
  return ModelSpec::from_file(root + "/" + m["spec"].get<std::string>());
}

// The shapes of a case's inputs for `batch` images: a model's through the
// autoencoder contract (checked), a one-layer step's "image" with "channels" channels.
std::map<std::string, Shape> case_inputs(const ModelSpec& spec, const json& m, std::int64_t batch) {
  const std::string step_loss = m.value("step_loss", "");
  if (!step_loss.empty() && step_loss != "mse")
    throw ConfigError("case '" + m["name"].get<std::string>() + "': \"step_loss\" must be \"mse\", got \"" + step_loss +
                      "\"");
  const std::int64_t patch = m["patch"], channels = m.value("channels", 3);
  if (layer_step(m)) return {{codec::kImage, Shape{batch, channels, patch, patch}}};
  codec::check_contract(spec);
  return codec::model_input_shapes(spec, Shape{batch, 3, patch, patch});
}

// A training step of a model spec, built through the autoencoder contract as
// plexus-ae train builds it: inputs from model_input_shapes, and for a
// variable-rate model each patch n at level n mod K (every level trained)
// with MSE weight 1. A one-layer case's step minimises its "mse" alone.
std::unique_ptr<ModelCase> model_case(const Registry& registry, const json& m, const std::string& root,
                                      Precision precision) {
  const Device gpu = Device::cuda(0);
  ModelSpec spec = case_spec(m, root);
  const std::int64_t batch = m["batch"];
  const std::map<std::string, Shape> inputs = case_inputs(spec, m, batch);
  const Shape image = inputs.at(codec::kImage);
  auto owned = std::make_unique<ModelCase>();
  ModelCase& c = *owned;
  c.net = std::make_unique<Net>(spec, registry, inputs, DType::f32, gpu, 1);
  c.ctx = std::make_unique<Context>(gpu, 1);
  c.ctx->set_precision(precision);
  c.net->set_activation_storage(activation_storage_for(precision, gpu, c.ctx->kernel_settings()));
  c.net->set_activation_fusion(activation_fusion_for_training(c.ctx->kernel_settings()));
  c.ctx->set_training(true);
  std::mt19937_64 rng(2);
  c.net->input(codec::kImage).copy_from(random_tensor(image, 0.0, 1.0, rng, gpu));
  if (const int levels = codec::rate_levels(spec); levels > 0) {
    std::vector<double> level(static_cast<std::size_t>(batch)), weight(static_cast<std::size_t>(batch), 1.0);
    for (std::size_t n = 0; n < level.size(); ++n) level[n] = static_cast<double>(n % static_cast<std::size_t>(levels));
    codec::set_rate_inputs(*c.ctx, *c.net, level, weight);
  }
  c.params = c.net->trainable_parameters();
  c.loss_weights = {{codec::kDistortion, codec::distortion_weight(case_lambda(m))}};
  if (!layer_step(m)) c.loss_weights[codec::kRate] = 1.0;
  return owned;
}

// --check: a selected case's net built on the CPU for one image (its spec
// read, its shapes inferred, the contract checked), without a GPU.
json check_model(const Registry& registry, const json& m, const std::string& root) {
  const ModelSpec spec = case_spec(m, root);
  const Net net(spec, registry, case_inputs(spec, m, 1));
  if (!net.has_blob(codec::kDistortion))
    throw ConfigError("case '" + m["name"].get<std::string>() + "' has no \"mse\"");
  return {{"kind", "check"}, {"name", m["name"]}, {"nodes", spec.nodes.size()}, {"parameters", net.parameter_count()}};
}

// Peak device memory of a case, in bytes: the high-water mark of the memory
// in use from the stream-ordered pool that every Plexus tensor comes from
// (cudaMallocAsync's default pool, cudaMemPoolAttrUsedMemHigh), plus that of
// the allocations a CUDA graph makes (cudaGraphMemAttrUsedMemHigh). Both are
// reset before the case is built, so the number counts its parameters,
// gradients, Adam state, inputs, activations and scratch, what
// torch.cuda.max_memory_allocated counts on the PyTorch side. Not counted:
// the CUDA context and what is made with plain cudaMalloc, outside the pool:
// each Context's fixed cuBLAS workspace (32 MiB, backend_cuda.cpp) and
// random seed, and Adam's few-byte tables of parameter slices. The two marks
// may peak at different moments, so their sum is an upper bound when a
// graph is used.
class PeakMemory {
 public:
  PeakMemory() {
    cuda::check_cuda(cudaDeviceGetDefaultMemPool(&pool_, 0), "cudaDeviceGetDefaultMemPool", __FILE__, __LINE__);
    cuda::check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize", __FILE__, __LINE__);
    std::uint64_t zero = 0;  // the attributes are cuuint64_t, a std::uint64_t
    cuda::check_cuda(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrUsedMemHigh, &zero), "cudaMemPoolSetAttribute",
                     __FILE__, __LINE__);
    cuda::check_cuda(cudaDeviceSetGraphMemAttribute(0, cudaGraphMemAttrUsedMemHigh, &zero),
                     "cudaDeviceSetGraphMemAttribute", __FILE__, __LINE__);
  }
  double bytes() const {
    cuda::check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize", __FILE__, __LINE__);
    std::uint64_t pool = 0, graph = 0;
    cuda::check_cuda(cudaMemPoolGetAttribute(pool_, cudaMemPoolAttrUsedMemHigh, &pool), "cudaMemPoolGetAttribute",
                     __FILE__, __LINE__);
    cuda::check_cuda(cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrUsedMemHigh, &graph),
                     "cudaDeviceGetGraphMemAttribute", __FILE__, __LINE__);
    return static_cast<double>(pool) + static_cast<double>(graph);
  }

 private:
  cudaMemPool_t pool_ = nullptr;
};

json time_model(const Registry& registry, const json& m, const std::string& root, Precision precision, int warmup,
                int repeats) {
  PeakMemory peak;
  auto model_case_owned = model_case(registry, m, root, precision);
  ModelCase& c = *model_case_owned;
  const double batch = m["batch"];
  Timer timer;
  double step_ms = timer.median_ms(*c.ctx, warmup, repeats, [&] { c.step(); });
  return {{"kind", "train_step"},
          {"name", m["name"]},
          {"step_ms", step_ms},
          {"images_per_s", 1000.0 * batch / step_ms},
          {"peak_bytes", peak.bytes()}};
}

// The same step, recorded once into a CUDA graph and replayed (ModelCase::graph_step).
json time_model_graph(const Registry& registry, const json& m, const std::string& root, Precision precision, int warmup,
                      int repeats) {
  PeakMemory peak;
  auto model_case_owned = model_case(registry, m, root, precision);
  ModelCase& c = *model_case_owned;
  const double batch = m["batch"];
  StepGraph graph(true);
  Timer timer;
  double step_ms = timer.median_ms(*c.ctx, std::max(warmup, 2), repeats, [&] { c.graph_step(graph); });
  return {{"kind", "train_step_graph"},
          {"name", m["name"]},
          {"step_ms", step_ms},
          {"images_per_s", 1000.0 * batch / step_ms},
          {"recordings", graph.recordings()},
          {"peak_bytes", peak.bytes()}};
}

// Every kernel of `steps` replays of the CUDA-graph step (as
// time_model_graph takes it, after warm-up replays), each step synchronised
// and bounded by the GPU clock before its launch and after it ended: one
// "timeline_step" row per step (its span) and one "kernel" row per kernel
// (stream, start and end in us from the step's bound), for
// lab/bench/timeline_table.py.
json timeline_model(const Registry& registry, const json& m, const std::string& root, Precision precision, int steps) {
  auto model_case_owned = model_case(registry, m, root, precision);
  ModelCase& c = *model_case_owned;
  StepGraph graph(true);
  // Recording from before the graph is captured, so that its kernels are
  // instrumented whatever CUPTI does with graphs made earlier; the warm-up
  // steps' kernels fall outside the bounds and are left out.
  bench::KernelTimeline timeline;
  for (int i = 0; i < 3; ++i) c.graph_step(graph);
  c.ctx->synchronize();
  std::vector<std::pair<std::uint64_t, std::uint64_t>> bounds;
  for (int i = 0; i < steps; ++i) {
    const std::uint64_t begin = bench::KernelTimeline::now_ns();
    c.graph_step(graph);
    c.ctx->synchronize();
    bounds.emplace_back(begin, bench::KernelTimeline::now_ns());
  }
  json rows = json::array();
  const std::vector<bench::KernelRecord> kernels = timeline.finish();
  for (int i = 0; i < steps; ++i) {
    const auto [begin, end] = bounds[static_cast<std::size_t>(i)];
    rows.push_back({{"kind", "timeline_step"}, {"model", m["name"]}, {"step", i}, {"span_us", (end - begin) / 1e3}});
    for (const auto& k : kernels)
      if (k.start_ns >= begin && k.end_ns <= end)
        rows.push_back({{"kind", "kernel"},
                        {"model", m["name"]},
                        {"step", i},
                        {"name", k.name},
                        {"stream", k.stream},
                        {"start_us", (k.start_ns - begin) / 1e3},
                        {"end_us", (k.end_ns - begin) / 1e3}});
  }
  return rows;
}

// The ceilings the floors divide by, measured here: dense GEMM throughput
// from an 8192^3 f32 cuda::gemm at the run's precision (FP32, TF32 or BF16
// products), and device-memory bandwidth
// from a 1 GiB device-to-device copy (read + write counted).
struct Ceilings {
  double gemm_flops_per_s = 0;
  double bytes_per_s = 0;
};

Ceilings measure_ceilings(Precision precision) {
  const Device gpu = Device::cuda(0);
  Context ctx(gpu, 1);
  ctx.set_precision(precision);
  Ceilings c;
  const int n = 8192;
  Tensor a({n, n}, DType::f32, gpu), b({n, n}, DType::f32, gpu), out({n, n}, DType::f32, gpu);
  Timer timer;
  double ms = timer.median_ms(ctx, 2, 5, [&] {
    cuda::gemm<float>(ctx, false, false, n, n, n, 1.0f, a.data<float>(), b.data<float>(), 0.0f, out.data<float>());
  });
  c.gemm_flops_per_s = 2.0 * n * double(n) * n / (ms * 1e-3);
  const std::int64_t elements = 256ll << 20;  // 1 GiB of f32
  Tensor from({elements}, DType::f32, gpu), to({elements}, DType::f32, gpu);
  ms = timer.median_ms(ctx, 2, 5, [&] {
    cuda::check_cuda(
        cudaMemcpyAsync(to.raw_data(), from.raw_data(), from.nbytes(), cudaMemcpyDeviceToDevice, cuda::stream(ctx)),
        "cudaMemcpyAsync", __FILE__, __LINE__);
  });
  c.bytes_per_s = 2.0 * double(from.nbytes()) / (ms * 1e-3);
  return c;
}

// CUDA events (and NVTX ranges) around every node's forward and backward.
class NodeTimer : public NodeObserver {
 public:
  explicit NodeTimer(Context& ctx) : ctx_(ctx) {}
  ~NodeTimer() override {
    for (auto& r : records_) {
      cudaEventDestroy(r.start);
      cudaEventDestroy(r.stop);
    }
  }
  void before(const std::string& node, const std::string& type, bool backward) override {
    nvtxRangePushA((node + (backward ? " backward" : " forward")).c_str());
    Record r{node, type, backward, nullptr, nullptr};
    cuda::check_cuda(cudaEventCreate(&r.start), "cudaEventCreate", __FILE__, __LINE__);
    cuda::check_cuda(cudaEventCreate(&r.stop), "cudaEventCreate", __FILE__, __LINE__);
    cuda::check_cuda(cudaEventRecord(r.start, cuda::stream(ctx_)), "cudaEventRecord", __FILE__, __LINE__);
    records_.push_back(r);
  }
  void after(const std::string&, const std::string&, bool) override {
    cuda::check_cuda(cudaEventRecord(records_.back().stop, cuda::stream(ctx_)), "cudaEventRecord", __FILE__, __LINE__);
    nvtxRangePop();
  }
  struct Record {
    std::string node, type;
    bool backward;
    cudaEvent_t start, stop;
  };
  const std::vector<Record>& records() const { return records_; }

 private:
  Context& ctx_;
  std::vector<Record> records_;
};

// FLOPs and device-memory bytes a node's forward (backward: x2 FLOPs for
// convolutions, dx and dW; bytes as listed) cannot do without. FLOPs: the
// framework's forward count (plexus/flop_count.h: convolutions, GDN's C x C
// contraction per pixel, ...); GDN's backward is 4x its forward. Everything
// else counts bytes: each input and output read or written once forward;
// backward reads the inputs and output gradients and writes the input gradients.
struct Floor {
  double forward_flops = 0, backward_flops = 0, forward_bytes = 0, backward_bytes = 0;
};

Floor floor_of(const Net& net, const NodeSpec& node) {
  Floor f;
  // Bytes of a blob as stored (f32, or bf16 under bf16 activation storage); its gradient has its dtype.
  auto bytes = [&](const std::string& blob) {
    return double(shape_numel(net.blob_shape(blob))) * double(dtype_size(net.blob_dtype(blob)));
  };
  double in = 0, out = 0;
  std::vector<Shape> inputs, outputs;
  for (const auto& b : node.inputs) {
    in += bytes(b);
    inputs.push_back(net.blob_shape(b));
  }
  for (const auto& b : node.outputs) {
    out += bytes(b);
    outputs.push_back(net.blob_shape(b));
  }
  f.forward_bytes = in + out;
  f.backward_bytes = in + out + in;
  f.forward_flops = forward_flops(node.type, node.params, inputs, outputs).value_or(0.0);
  f.backward_flops = (node.type == "GDN" || node.type == "IGDN" ? 4 : 2) * f.forward_flops;
  return f;
}

json profile_model(const Registry& registry, const json& m, const std::string& root, Precision precision,
                   const Ceilings& ceil) {
  auto model_case_owned = model_case(registry, m, root, precision);
  ModelCase& c = *model_case_owned;
  for (int i = 0; i < 3; ++i) c.step();  // warm up: scratch buffers, cuBLAS heuristics
  c.ctx->synchronize();
  json rows = json::array();
  std::map<std::string, std::pair<double, double>> totals;  // node -> forward, backward ms, summed
  const int repeats = 5;
  for (int r = 0; r < repeats; ++r) {
    NodeTimer timer(*c.ctx);
    c.net->set_observer(&timer);
    nvtxRangePushA("train step");
    c.step();
    nvtxRangePop();
    c.net->set_observer(nullptr);
    c.ctx->synchronize();
    for (const auto& rec : timer.records()) {
      float ms = 0;
      cuda::check_cuda(cudaEventElapsedTime(&ms, rec.start, rec.stop), "cudaEventElapsedTime", __FILE__, __LINE__);
      (rec.backward ? totals[rec.node].second : totals[rec.node].first) += ms / repeats;
    }
  }
  for (const auto& node : c.net->spec().nodes) {
    const Floor f = floor_of(*c.net, node);
    const double floor_ms =
        1e3 * (std::max(f.forward_flops / ceil.gemm_flops_per_s, f.forward_bytes / ceil.bytes_per_s) +
               std::max(f.backward_flops / ceil.gemm_flops_per_s, f.backward_bytes / ceil.bytes_per_s));
    const auto& t = totals[node.name];
    rows.push_back({{"kind", "profile"},
                    {"model", m["name"]},
                    {"node", node.name},
                    {"type", node.type},
                    {"forward_ms", t.first},
                    {"backward_ms", t.second},
                    {"flops", f.forward_flops + f.backward_flops},
                    {"bytes", f.forward_bytes + f.backward_bytes},
                    {"floor_ms", floor_ms}});
  }
  return rows;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"plexus-bench: GPU timings of Plexus layers and training steps (JSON lines on stdout)"};
  std::string cases_path = "lab/bench/bench_cases.json", root = ".", only;
  bool tf32_alias = false, profile = false, models_only = false, check = false;
  std::string timeline_path;
  std::string precision = "f32";
  int warmup = 5, repeats = 20;
  app.add_option("--cases", cases_path, "benchmark cases file")->capture_default_str();
  app.add_option("--root", root, "repository root, for model spec paths")->capture_default_str();
  app.add_option("--warmup", warmup, "untimed runs before timing")->capture_default_str();
  app.add_option("--repeats", repeats, "timed runs; the median is reported")->capture_default_str();
  app.add_option("--only", only, "run only cases whose name contains this text");
  app.add_option("--precision", precision,
                 "f32 (strict), tf32 (f32 storage, TF32 tensor-core products) or bf16 (f32 storage, the "
                 "convolutions and cuBLAS products on BF16 tensor cores, GDN's tensor-core kernels as tf32); "
                 "PyTorch's default allows TF32 in cuDNN convolutions")
      ->check(CLI::IsMember({"f32", "tf32", "bf16"}))
      ->capture_default_str();
  app.add_flag("--models", models_only, "time only the models' training steps, not the layers");
  app.add_flag("--tf32", tf32_alias, "deprecated: same as --precision tf32");
  app.add_flag("--check", check,
               "time nothing: build each selected model case's net on the CPU for one image and print its "
               "parameters (no GPU needed)");
  app.add_flag("--profile", profile, "also a per-node time breakdown of each model's step, with FLOP/byte floors");
  app.add_option("--timeline", timeline_path,
                 "also write every kernel, memset and copy of 5 replays of each model's CUDA-graph step, with its "
                 "stream, start and end (CUPTI), as JSON lines to this file (lab/bench/timeline_table.py reads it)");
  CLI11_PARSE(app, argc, argv);
  if (tf32_alias) precision = "tf32";
  try {
    const Precision policy = parse_precision(precision);
    std::ifstream file(cases_path);
    if (!file) throw IoError("cannot open benchmark cases '" + cases_path + "'");
    json cases = json::parse(file);
    Registry registry = builtin_registry();
    // The cases --only keeps: those whose name contains its text.
    const auto selected = [&](const json& c) {
      return only.empty() || c["name"].get<std::string>().find(only) != std::string::npos;
    };
    if (check) {
      for (const auto& m : cases["models"])
        if (selected(m)) std::cout << check_model(registry, m, root).dump() << std::endl;
      return 0;
    }
    if (!cuda_available()) throw DeviceError("plexus-bench needs a CUDA GPU, and none is visible");
    for (const auto& c : models_only ? json::array() : cases["layers"]) {
      if (!selected(c)) continue;
      json row = time_layer(registry, c, policy, warmup, repeats);
      row["precision"] = precision;
      std::cout << row.dump() << std::endl;
    }
    for (const auto& m : cases["models"]) {
      if (!selected(m)) continue;
      json row = time_model(registry, m, root, policy, warmup, std::max(5, repeats / 2));
      row["precision"] = precision;
      std::cout << row.dump() << std::endl;
      json graph_row = time_model_graph(registry, m, root, policy, warmup, std::max(5, repeats / 2));
      graph_row["precision"] = precision;
      std::cout << graph_row.dump() << std::endl;
    }
    if (!timeline_path.empty()) {
      std::ofstream out(timeline_path);
      if (!out) throw IoError("cannot write the timeline to '" + timeline_path + "'");
      for (const auto& m : cases["models"]) {
        if (!selected(m)) continue;
        for (const auto& row : timeline_model(registry, m, root, policy, 5)) out << row.dump() << "\n";
      }
      if (!out.flush()) throw IoError("could not write the timeline to '" + timeline_path + "'");
    }
    if (profile) {
      const Ceilings ceilings = measure_ceilings(policy);
      std::cout << json{{"kind", "ceilings"},
                        {"precision", precision},
                        {"gemm_tflops", ceilings.gemm_flops_per_s / 1e12},
                        {"bandwidth_gb_per_s", ceilings.bytes_per_s / 1e9}}
                       .dump()
                << std::endl;
      for (const auto& m : cases["models"]) {
        if (!selected(m)) continue;
        for (const auto& row : profile_model(registry, m, root, policy, ceilings)) std::cout << row.dump() << std::endl;
      }
    }
  } catch (const std::exception& e) {
    std::cerr << "plexus-bench: " << e.what() << "\n";
    return 1;
  }
  return 0;
}

#include "plexus/gradcheck.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <sstream>

#include "plexus/error.h"

namespace plexus {

namespace {

std::vector<double> random_values(std::int64_t n, double low, double high, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> dist(low, high);
  std::vector<double> values(static_cast<std::size_t>(n));
  double min_magnitude = 1e-2 * (high - low);
  for (auto& v : values) {
    do v = dist(rng);
    while (std::abs(v) < min_magnitude);  // random and never (near) zero
  }
  return values;
}

std::string describe_shapes(const std::vector<Shape>& shapes) {
  std::string text;
  for (const auto& s : shapes) text += (text.empty() ? "" : ", ") + shape_str(s);
  return text;
}

// A layer set up for checking: parameters initialised, inputs random.
struct Fixture {
  std::unique_ptr<Layer> layer;
  std::vector<Shape> output_shapes;
  std::vector<std::vector<double>> inputs;  // host copies
};

Fixture make_fixture(
    const Registry& registry, const std::string& type, const nlohmann::json& params,
    const std::vector<Shape>& input_shapes, DType dtype, Device device, std::uint64_t seed, double low, double high,
    const std::function<void(int, std::vector<double>&, std::mt19937_64&)>& input_filler,
    const std::function<void(const std::string&, std::vector<double>&, std::mt19937_64&)>& parameter_filler) {
  Fixture f;
  f.layer = registry.create(type, "gradcheck", params);
  f.output_shapes = f.layer->output_shapes(input_shapes);
  f.layer->create_parameters(input_shapes);
  std::mt19937_64 rng(seed);
  f.layer->initialize_parameters(dtype, device, rng);
  if (parameter_filler) {
    for (Parameter* p : f.layer->parameters()) {
      std::vector<double> values = p->value.to_values();
      parameter_filler(p->name, values, rng);
      p->value = Tensor::from_values(values, p->shape, dtype, device);
    }
  }
  for (std::size_t i = 0; i < input_shapes.size(); ++i) {
    auto values = random_values(shape_numel(input_shapes[i]), low, high, rng);
    if (input_filler) input_filler(static_cast<int>(i), values, rng);
    f.inputs.push_back(std::move(values));
  }
  return f;
}

double relative_error(double a, double b) { return std::abs(a - b) / std::max({std::abs(a), std::abs(b), 1.0}); }

// Row-major flat index -> index per dimension.
std::vector<std::int64_t> unravel_index(std::int64_t index, const Shape& shape) {
  std::vector<std::int64_t> position(shape.size());
  for (std::size_t d = shape.size(); d-- > 0;) {
    position[d] = shape[d] > 0 ? index % shape[d] : 0;
    index = shape[d] > 0 ? index / shape[d] : 0;
  }
  return position;
}

std::string position_text(const GradientMismatch& m) {
  std::string text = "[";
  for (std::size_t d = 0; d < m.position.size(); ++d) text += (d ? ", " : "") + std::to_string(m.position[d]);
  return text + "]";
}

// Sorts failures worst-first into result.mismatches (the first 8) and adds a
// hint per tensor whose every failure has one recognisable cause.
template <typename Failure>
void diagnose(std::vector<Failure>& failed, double tolerance, GradCheckResult& result) {
  std::stable_sort(failed.begin(), failed.end(),
                   [](const Failure& a, const Failure& b) { return a.mismatch.error > b.mismatch.error; });
  for (std::size_t i = 0; i < failed.size() && i < 8; ++i) result.mismatches.push_back(failed[i].mismatch);
  std::vector<std::string> tensors;
  for (const auto& f : failed)
    if (std::find(tensors.begin(), tensors.end(), f.mismatch.tensor) == tensors.end())
      tensors.push_back(f.mismatch.tensor);
  for (const auto& tensor : tensors) {
    bool all_raw_match = true, all_negated = true;
    for (const auto& f : failed) {
      if (f.mismatch.tensor != tensor) continue;
      all_raw_match = all_raw_match && relative_error(f.raw, f.mismatch.numeric) <= tolerance;
      all_negated = all_negated && relative_error(f.mismatch.analytic, -f.mismatch.numeric) <= tolerance;
    }
    const bool is_parameter = tensor.rfind("parameter", 0) == 0;
    if (all_raw_match && is_parameter)
      result.hints.push_back(tensor + ": backward assigned (=) the gradient instead of accumulating (+=) into it; "
                                      "the Layer contract is += for parameter gradients");
    else if (all_raw_match)
      result.hints.push_back(tensor + ": backward added (+=) to the input gradient instead of overwriting it; "
                                      "the Layer contract is = for input gradients");
    else if (all_negated)
      result.hints.push_back(tensor + ": analytic is about minus numeric everywhere it fails: a sign error?");
  }
}

}  // namespace

std::string GradCheckResult::report() const {
  std::ostringstream out;
  out << layer << ": " << checked << " gradients checked, " << skipped << " skipped at kinks, " << failures
      << " failed; max relative error " << max_relative_error;
  for (const auto& hint : hints) out << "\n  hint: " << hint;
  if (!mismatches.empty())
    out << "\n  failures, worst first"
        << (static_cast<std::int64_t>(mismatches.size()) < failures
                ? " (the first " + std::to_string(mismatches.size()) + ")"
                : std::string())
        << ":";
  for (const auto& m : mismatches) {
    out << "\n  " << m.tensor << " " << position_text(m) << ": analytic " << m.analytic << ", numeric " << m.numeric
        << " (relative error " << m.error << ")";
    if (relative_error(m.analytic, -m.numeric) <= 1e-3 && std::abs(m.numeric) > 0) out << " <- about minus numeric";
  }
  return out.str();
}

GradCheckResult check_gradients(const Registry& registry, const std::string& type, const nlohmann::json& params,
                                const std::vector<Shape>& input_shapes, Device device,
                                const GradCheckOptions& options) {
  const DType dtype = DType::f64;
  Fixture f = make_fixture(registry, type, params, input_shapes, dtype, device, options.seed, options.input_low,
                           options.input_high, options.input_filler, options.parameter_filler);
  Layer& layer = *f.layer;
  Context ctx(device, options.seed);
  ctx.set_training(options.training);

  GradCheckResult result;
  result.layer = type + " " + nlohmann::json(params).dump() + " on " + device.str() + " with inputs " +
                 describe_shapes(input_shapes);

  std::vector<Tensor> inputs, outputs, projections;
  for (std::size_t i = 0; i < input_shapes.size(); ++i)
    inputs.push_back(Tensor::from_values(f.inputs[i], input_shapes[i], dtype, device));
  std::mt19937_64 rng(options.seed + 1);
  std::vector<std::vector<double>> projection_values;
  for (const auto& shape : f.output_shapes) {
    outputs.emplace_back(shape, dtype, device);
    projection_values.push_back(random_values(shape_numel(shape), -1.0, 1.0, rng));
    projections.push_back(Tensor::from_values(projection_values.back(), shape, dtype, device));
  }
  ConstTensors in, out, dout;
  MutableTensors out_mutable;
  for (auto& t : inputs) in.push_back(&t);
  for (auto& t : outputs) {
    out.push_back(&t);
    out_mutable.push_back(&t);
  }
  for (auto& t : projections) dout.push_back(&t);

  // L = sum_k r_k * out_k, with the generators restarted so noise repeats.
  auto objective = [&]() {
    ctx.reseed(options.seed);
    layer.forward(ctx, in, out_mutable);
    double total = 0.0;
    for (std::size_t k = 0; k < outputs.size(); ++k) {
      std::vector<double> values = outputs[k].to_values();
      for (std::size_t j = 0; j < values.size(); ++j) total += projection_values[k][j] * values[j];
    }
    return total;
  };

  // Analytic gradients.
  // Input gradients start as garbage (backward must overwrite them) and
  // parameter gradients as random values (backward must add to them).
  std::mt19937_64 prefill_rng(options.seed + 2);
  std::vector<Tensor> input_grads;
  std::vector<std::vector<double>> input_garbage;
  MutableTensors din;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    bool differentiable = layer.traits(device).input_is_differentiable(static_cast<int>(i));
    input_garbage.push_back(differentiable ? random_values(shape_numel(input_shapes[i]), -1.0, 1.0, prefill_rng)
                                           : std::vector<double>());
    input_grads.push_back(differentiable ? Tensor::from_values(input_garbage.back(), input_shapes[i], dtype, device)
                                         : Tensor());
  }
  for (auto& g : input_grads) din.push_back(g.defined() ? &g : nullptr);
  std::vector<std::vector<double>> prefilled;
  for (Parameter* p : layer.parameters()) {
    prefilled.push_back(random_values(shape_numel(p->shape), -1.0, 1.0, prefill_rng));
    p->grad.copy_from(Tensor::from_values(prefilled.back(), p->shape, dtype, device));
  }
  objective();
  layer.backward(ctx, in, out, dout, din);

  // Every failure, kept with what the hints need: the raw value backward left.
  struct Failure {
    GradientMismatch mismatch;
    double raw;
  };
  std::vector<Failure> failed;
  auto compare = [&](const std::string& name, const Shape& shape, double analytic, double numeric, double raw,
                     std::int64_t index) {
    double error = relative_error(analytic, numeric);
    result.checked++;
    result.max_relative_error = std::max(result.max_relative_error, error);
    if (!(error <= options.tolerance)) {  // also catches NaN
      result.failures++;
      failed.push_back(
          {{name, index, analytic, numeric, unravel_index(index, shape), std::isnan(error) ? INFINITY : error}, raw});
    }
  };
  // Perturbs element j of the tensor behind `host` (re-uploaded to `target`).
  auto numeric_gradient = [&](std::vector<double>& host, Tensor& target, std::size_t j) {
    double original = host[j];
    host[j] = original + options.step;
    target.copy_from(Tensor::from_values(host, target.shape(), dtype, device));
    double plus = objective();
    host[j] = original - options.step;
    target.copy_from(Tensor::from_values(host, target.shape(), dtype, device));
    double minus = objective();
    host[j] = original;
    target.copy_from(Tensor::from_values(host, target.shape(), dtype, device));
    return (plus - minus) / (2.0 * options.step);
  };

  // The elements of an n-element tensor to check: all of them, or one per
  // window of ceil(n / max_elements_per_tensor) at a seeded random offset.
  std::mt19937_64 sample_rng(options.seed);
  auto sampled = [&](std::size_t n) {
    std::vector<std::size_t> elements;
    const auto limit = static_cast<std::size_t>(std::max<std::int64_t>(options.max_elements_per_tensor, 0));
    const std::size_t window = limit == 0 || n <= limit ? 1 : (n + limit - 1) / limit;
    for (std::size_t begin = 0; begin < n; begin += window) {
      const std::size_t size = std::min(window, n - begin);
      elements.push_back(begin + std::uniform_int_distribution<std::size_t>(0, size - 1)(sample_rng));
    }
    return elements;
  };

  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (!din[i]) continue;
    std::vector<double> analytic = input_grads[i].to_values();
    std::vector<double> host = f.inputs[i];
    for (std::size_t j : sampled(host.size())) {
      if (options.kink_range >= 0 && std::abs(host[j] - options.kink) <= options.kink_range) {
        result.skipped++;
        continue;
      }
      // raw - garbage is what an accumulating (+=) backward computed.
      compare("input " + std::to_string(i), input_shapes[i], analytic[j], numeric_gradient(host, inputs[i], j),
              analytic[j] - input_garbage[i][j], static_cast<std::int64_t>(j));
    }
  }
  auto parameters = layer.parameters();
  for (std::size_t k = 0; k < parameters.size(); ++k) {
    Parameter* p = parameters[k];
    if (!p->trainable) continue;  // a buffer: constant as far as backward is concerned
    std::vector<double> after = p->grad.to_values();
    std::vector<double> host = p->value.to_values();
    for (std::size_t j : sampled(host.size()))
      compare("parameter " + p->name, p->shape, after[j] - prefilled[k][j], numeric_gradient(host, p->value, j),
              after[j], static_cast<std::int64_t>(j));
  }
  diagnose(failed, options.tolerance, result);
  return result;
}

std::string ParityResult::report() const {
  std::ostringstream out;
  out << layer << ": max error " << max_error << " (in units of the tolerance formula)";
  for (const auto& c : compared) out << "\n  " << c;
  for (const auto& f : failures) out << "\n  FAIL " << f;
  return out.str();
}

ParityResult check_parity(const Registry& registry, const std::string& type, const nlohmann::json& params,
                          const std::vector<Shape>& input_shapes, const ParityOptions& options) {
  if (!cuda_available()) throw DeviceError("check_parity needs a CUDA GPU, and none is visible");
  const Device gpu = Device::cuda(0);
  Fixture cpu = make_fixture(registry, type, params, input_shapes, options.dtype, Device::cpu(), options.seed,
                             options.input_low, options.input_high, options.input_filler, options.parameter_filler);
  std::unique_ptr<Layer> cuda_layer = registry.create(type, "parity", params);
  cuda_layer->output_shapes(input_shapes);
  cuda_layer->create_parameters(input_shapes);
  std::mt19937_64 unused(0);
  cuda_layer->initialize_parameters(options.dtype, gpu, unused);
  auto cpu_parameters = cpu.layer->parameters();
  auto cuda_parameters = cuda_layer->parameters();
  for (std::size_t p = 0; p < cpu_parameters.size(); ++p) cuda_parameters[p]->value.copy_from(cpu_parameters[p]->value);

  ParityResult result;
  result.layer = type + " " + nlohmann::json(params).dump() + " " + dtype_name(options.dtype) +
                 " cpu vs cuda with inputs " + describe_shapes(input_shapes);

  struct Side {
    std::unique_ptr<Context> ctx;
    std::vector<Tensor> inputs, outputs, output_grads, input_grads;
  };
  std::mt19937_64 rng(options.seed + 7);
  std::vector<std::vector<double>> dout_values;
  for (const auto& shape : cpu.output_shapes) dout_values.push_back(random_values(shape_numel(shape), -1, 1, rng));

  auto run = [&](Layer& layer, Device device) {
    Side side;
    side.ctx = std::make_unique<Context>(device, options.seed);
    side.ctx->set_training(options.training);
    ConstTensors in, out, dout;
    MutableTensors out_mutable, din;
    for (std::size_t i = 0; i < input_shapes.size(); ++i)
      side.inputs.push_back(Tensor::from_values(cpu.inputs[i], input_shapes[i], options.dtype, device));
    for (std::size_t k = 0; k < cpu.output_shapes.size(); ++k) {
      side.outputs.emplace_back(cpu.output_shapes[k], options.dtype, device);
      side.output_grads.push_back(Tensor::from_values(dout_values[k], cpu.output_shapes[k], options.dtype, device));
    }
    for (std::size_t i = 0; i < input_shapes.size(); ++i)
      side.input_grads.push_back(layer.traits(device).input_is_differentiable(static_cast<int>(i))
                                     ? Tensor(input_shapes[i], options.dtype, device)
                                     : Tensor());
    for (auto& t : side.inputs) in.push_back(&t);
    for (auto& t : side.outputs) {
      out.push_back(&t);
      out_mutable.push_back(&t);
    }
    for (auto& t : side.output_grads) dout.push_back(&t);
    for (auto& t : side.input_grads) din.push_back(t.defined() ? &t : nullptr);
    for (Parameter* p : layer.parameters()) p->grad.fill_zero();
    layer.forward(*side.ctx, in, out_mutable);
    layer.backward(*side.ctx, in, out, dout, din);
    side.ctx->synchronize();
    return side;
  };
  Side on_cpu = run(*cpu.layer, Device::cpu());
  Side on_gpu = run(*cuda_layer, gpu);

  auto compare = [&](const std::string& name, const Tensor& expected, const Tensor& actual) {
    std::vector<double> a = expected.to_values(), b = actual.to_values();
    double mean_abs = 0.0;
    for (double v : a) mean_abs += std::abs(v);
    mean_abs = a.empty() ? 0.0 : mean_abs / static_cast<double>(a.size());
    double worst = 0.0;
    std::size_t worst_index = 0;
    for (std::size_t j = 0; j < a.size(); ++j) {
      double scale = std::max({std::abs(a[j]), mean_abs, 1e-30});
      double error = std::abs(a[j] - b[j]) / scale;
      if (!(error <= worst)) {  // NaN becomes the worst
        worst = std::isnan(error) ? INFINITY : error;
        worst_index = j;
      }
    }
    std::ostringstream line;
    line << name << ": max relative error " << worst;
    result.compared.push_back(line.str());
    result.max_error = std::max(result.max_error, worst / options.tolerance);
    if (!(worst <= options.tolerance)) {
      std::ostringstream failure;
      failure << name << " [" << worst_index << "]: cpu " << a[worst_index] << ", cuda " << b[worst_index]
              << " (relative error " << worst << " > " << options.tolerance << ")";
      result.failures.push_back(failure.str());
    }
  };
  for (std::size_t k = 0; k < on_cpu.outputs.size(); ++k)
    compare("output " + std::to_string(k), on_cpu.outputs[k], on_gpu.outputs[k]);
  for (std::size_t i = 0; i < on_cpu.input_grads.size(); ++i)
    if (on_cpu.input_grads[i].defined())
      compare("input gradient " + std::to_string(i), on_cpu.input_grads[i], on_gpu.input_grads[i]);
  for (std::size_t p = 0; p < cpu_parameters.size(); ++p)
    if (cpu_parameters[p]->trainable)
      compare("parameter gradient " + cpu_parameters[p]->name, cpu_parameters[p]->grad, cuda_parameters[p]->grad);
  return result;
}

}  // namespace plexus

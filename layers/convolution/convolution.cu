// CUDA passes of Convolution (convolution.h): the implicit-GEMM tensor-core
// engine (implicit_gemm.h) where it takes the pass, else im2col / col2im
// kernels plus cuBLAS GEMMs batched over the images of a chunk, on f32
// stand-ins of bf16 activations (activation_storage.h).
#include <algorithm>
#include <optional>

#include "activation_storage.h"
#include "convolution/channel_ops.h"
#include "convolution/convolution.h"
#include "convolution/scratch.h"
#include "plexus/cuda/blas.h"
#include "plexus/cuda/branch.h"

namespace plexus::layers {

namespace {

// One engine scratch and one column scratch per context, used by every
// convolution in turn.
implicit_gemm::Scratch& engine_scratch(Context& ctx) {
  return ctx.shared_state<implicit_gemm::Scratch>("convolution.tensor_core_scratch");
}
ColumnScratch& column_scratch(Context& ctx) { return ctx.shared_state<ColumnScratch>("convolution.column_scratch"); }

// Whether the backward pass runs the parameter gradients on a cuda::Branch:
// unless KernelSettings::conv_branch is off (to compare).
bool parameter_gradients_beside(const Context& ctx) { return ctx.kernel_settings().conv_branch; }

}  // namespace

implicit_gemm::ConvProblem Convolution::conv_problem(const Shape& x, const Shape& y) const {
  implicit_gemm::ConvProblem problem;
  problem.batch = x[0];
  problem.in_channels = x[1];
  problem.height = x[2];
  problem.width = x[3];
  problem.out_channels = y[1];
  problem.out_height = y[2];
  problem.out_width = y[3];
  problem.kernel = kernel_;
  problem.stride = stride_;
  problem.padding = padding_;
  return problem;
}

std::int64_t Convolution::images_per_cuda_chunk(const ConvGeometry& geometry, std::int64_t out_channels,
                                                std::int64_t batch, std::size_t element_size) const {
  const std::int64_t weight_size = out_channels * geometry.column_rows();
  return images_per_chunk(geometry.column_size() + weight_size, element_size, batch, scratch_limit_);
}

void Convolution::conv_forward_cuda(Context& ctx, const Tensor& x, bool with_bias, const FusedActivation& activation,
                                    Tensor& y) {
  if (grouped_or_dilated()) return grouped_forward_cuda(ctx, x, with_bias, activation, y);
  const ConvGeometry g = geometry(x.shape(), y.shape());
  const std::int64_t batch = x.dim(0), out = y.dim(1), rows = g.column_rows(), patches = g.column_cols();
  const std::int64_t out_plane = out * patches;  // elements of one image of y
  if (batch == 0) return;
  const bool bias = with_bias && has_bias_;
  const DType dtype = parameter("weight").value.dtype();
  const implicit_gemm::ConvProblem problem = conv_problem(x.shape(), y.shape());
  if (implicit_gemm::supports(ctx, dtype, problem) && implicit_gemm::takes_forward(problem)) {
    kept_source_.made_from = nullptr;  // a copy is kept from this forward to the next backward only
    implicit_gemm::forward(ctx, problem, x, parameter("weight").value.data<float>(),
                           {bias ? parameter("bias").value.data<float>() : nullptr, activation}, y, engine_scratch(ctx),
                           ctx.training() ? &kept_source_ : nullptr);
    return;
  }
  ColumnScratch& scratch = column_scratch(ctx);
  const Tensor x_values = f32_stand_in(ctx, x, scratch.x_f32);
  F32Output y_values(ctx, y, scratch.y_out_f32);
  dispatch_float(dtype, [&](auto zero) {
    using T = decltype(zero);
    const std::int64_t chunk = images_per_cuda_chunk(g, out, batch, sizeof(T));
    T* columns = grown_scratch(ctx, scratch.columns, {chunk, rows, patches}, dtype).data<T>();
    const T* weight = parameter("weight").value.data<T>();
    const T* x_data = x_values.data<T>();
    T* y_data = y_values.f32().data<T>();
    for (std::int64_t first = 0; first < batch; first += chunk) {
      const std::int64_t count = std::min(chunk, batch - first);
      im2col_cuda(ctx, x_data + first * g.image_size(), g, count, columns);
      // y_n[out, P] = W[out, K] columns_n[K, P] for each image n of the chunk (W shared: stride 0).
      cuda::gemm_strided_batched<T>(ctx, false, false, static_cast<int>(out), static_cast<int>(patches),
                                    static_cast<int>(rows), T(1), weight, 0, columns, rows * patches, T(0),
                                    y_data + first * out_plane, out_plane, static_cast<int>(count));
    }
    add_channel_bias_cuda(ctx, bias ? parameter("bias").value.data<T>() : nullptr, activation, batch, out, patches,
                          y_data);
  });
  y_values.store(ctx);
}

void Convolution::conv_backward_data_cuda(Context& ctx, const Tensor& y, bool with_bias,
                                          const FusedActivation& activation, Tensor& x) {
  if (grouped_or_dilated()) return grouped_backward_data_cuda(ctx, y, with_bias, activation, x);
  const ConvGeometry g = geometry(x.shape(), y.shape());
  const std::int64_t batch = y.dim(0), out = y.dim(1), rows = g.column_rows(), patches = g.column_cols();
  const std::int64_t out_plane = out * patches;
  if (batch == 0) return;
  const bool bias = with_bias && has_bias_;
  const DType dtype = parameter("weight").value.dtype();
  const implicit_gemm::ConvProblem problem = conv_problem(x.shape(), y.shape());
  if (implicit_gemm::supports(ctx, dtype, problem) && implicit_gemm::takes_backward_data(problem)) {
    implicit_gemm::backward_data(ctx, problem, y, parameter("weight").value.data<float>(),
                                 {bias ? parameter("bias").value.data<float>() : nullptr, activation}, x,
                                 engine_scratch(ctx));
    return;
  }
  ColumnScratch& scratch = column_scratch(ctx);
  const Tensor y_values = f32_stand_in(ctx, y, scratch.y_f32);
  F32Output x_values(ctx, x, scratch.x_out_f32);
  dispatch_float(dtype, [&](auto zero) {
    using T = decltype(zero);
    const std::int64_t chunk = images_per_cuda_chunk(g, out, batch, sizeof(T));
    T* columns = grown_scratch(ctx, scratch.columns, {chunk, rows, patches}, dtype).data<T>();
    const T* weight = parameter("weight").value.data<T>();
    const T* y_data = y_values.data<T>();
    T* x_data = x_values.f32().data<T>();
    for (std::int64_t first = 0; first < batch; first += chunk) {
      const std::int64_t count = std::min(chunk, batch - first);
      // columns_n[K, P] = W^T[K, out] y_n[out, P] (W shared: stride 0), then x_n = col2im(columns_n).
      cuda::gemm_strided_batched<T>(ctx, true, false, static_cast<int>(rows), static_cast<int>(patches),
                                    static_cast<int>(out), T(1), weight, 0, y_data + first * out_plane, out_plane, T(0),
                                    columns, rows * patches, static_cast<int>(count));
      col2im_cuda(ctx, columns, g, count, x_data + first * g.image_size());
    }
    add_channel_bias_cuda(ctx, bias ? parameter("bias").value.data<T>() : nullptr, activation, batch, g.channels,
                          g.height * g.width, x_data);
  });
  x_values.store(ctx);
}

void Convolution::conv_backward_cuda(Context& ctx, const Tensor& x, const Tensor& y, Tensor* x_grad, Tensor* y_grad,
                                     const Tensor& output_grad) {
  if (grouped_or_dilated()) return grouped_backward_cuda(ctx, x, y, x_grad, y_grad, output_grad);
  if (x.dim(0) == 0) return;
  // The tensor-core engine where it takes the pass, im2col + cuBLAS for the rest.
  const implicit_gemm::ConvProblem problem = conv_problem(x.shape(), y.shape());
  const bool engine = implicit_gemm::supports(ctx, parameter("weight").value.dtype(), problem);
  const bool engine_y_grad = y_grad && engine && implicit_gemm::takes_forward(problem);
  const bool engine_x_grad = x_grad && engine && implicit_gemm::takes_backward_data(problem);
  Parameter& weight = parameter("weight");
  // ConvTranspose2d's input gradient is forward over x, which copies x as
  // the weight gradient would: one copy, made before the branch, for both.
  if (engine_y_grad) implicit_gemm::keep_source(ctx, problem, x, kept_source_);
  const auto parameter_gradients = [&] {
    if (engine)
      implicit_gemm::backward_weight(ctx, problem, x, y, weight.grad.data<float>(), engine_scratch(ctx), &kept_source_);
    accumulate_bias_grad_cuda(ctx, output_grad);
  };
  // Nothing in the backward pass reads the parameter gradients, so the
  // engine's weight gradient and the bias gradient run on a branch of the
  // stream, beside the input gradient (the two use different scratch
  // buffers) and, inside Net::backward, beside the next layers' backward
  // too (Context::DeferredJoins), unless PLEXUS_CONV_BRANCH is "0". So a
  // bf16 tensor that both sides read through f32 stand-ins is widened once
  // on each: one stand-in made for both could be overwritten by the next
  // layers' passes while the branch still reads it.
  std::optional<cuda::Branch> branch;
  if (parameter_gradients_beside(ctx) && !parameter_gradients_inline_) {
    branch.emplace(ctx);
    branch->run(parameter_gradients);
  } else {
    parameter_gradients();
  }
  if (engine_y_grad)
    implicit_gemm::forward(ctx, problem, x, weight.value.data<float>(), {}, *y_grad, engine_scratch(ctx),
                           &kept_source_);
  if (engine_x_grad)
    implicit_gemm::backward_data(ctx, problem, y, weight.value.data<float>(), {}, *x_grad, engine_scratch(ctx));
  conv_backward_im2col_cuda(ctx, x, y, !engine, engine_x_grad ? nullptr : x_grad, engine_y_grad ? nullptr : y_grad);
  if (branch) branch->join();
  kept_source_.made_from = nullptr;  // x's memory may hold other values by the next pass
}

void Convolution::conv_backward_im2col_cuda(Context& ctx, const Tensor& x, const Tensor& y, bool weight_grad,
                                            Tensor* x_grad, Tensor* y_grad) {
  if (!weight_grad && !x_grad && !y_grad) return;
  const ConvGeometry g = geometry(x.shape(), y.shape());
  const std::int64_t batch = x.dim(0), out = y.dim(1), rows = g.column_rows(), patches = g.column_cols();
  const std::int64_t out_plane = out * patches;
  const std::int64_t weight_size = out * rows;
  Parameter& weight = parameter("weight");
  const DType dtype = weight.value.dtype();
  // f32 stand-ins of the bf16 tensors read (each converted once, though
  // read by several products) and written.
  ColumnScratch& scratch = column_scratch(ctx);
  const Tensor x_values = weight_grad || y_grad ? f32_stand_in(ctx, x, scratch.x_f32) : Tensor();
  const Tensor y_values = weight_grad || x_grad ? f32_stand_in(ctx, y, scratch.y_f32) : Tensor();
  std::optional<F32Output> x_grad_values, y_grad_values;
  if (x_grad) x_grad_values.emplace(ctx, *x_grad, scratch.x_out_f32);
  if (y_grad) y_grad_values.emplace(ctx, *y_grad, scratch.y_out_f32);
  dispatch_float(dtype, [&](auto zero) {
    using T = decltype(zero);
    const std::int64_t chunk = images_per_cuda_chunk(g, out, batch, sizeof(T));
    T* columns = grown_scratch(ctx, scratch.columns, {chunk, rows, patches}, dtype).data<T>();
    T* weight_grads =
        weight_grad ? grown_scratch(ctx, scratch.weight_grads, {chunk, out, rows}, dtype).data<T>() : nullptr;
    for (std::int64_t first = 0; first < batch; first += chunk) {
      const std::int64_t count = std::min(chunk, batch - first);
      const T* y_chunk = y_values.defined() ? y_values.data<T>() + first * out_plane : nullptr;
      if (weight_grad || y_grad) im2col_cuda(ctx, x_values.data<T>() + first * g.image_size(), g, count, columns);
      if (y_grad) {
        // y_grad_n[out, P] = W[out, K] columns_n[K, P]
        cuda::gemm_strided_batched<T>(ctx, false, false, static_cast<int>(out), static_cast<int>(patches),
                                      static_cast<int>(rows), T(1), weight.value.data<T>(), 0, columns, rows * patches,
                                      T(0), y_grad_values->f32().data<T>() + first * out_plane, out_plane,
                                      static_cast<int>(count));
      }
      if (weight_grad) {
        // G_n[out, K] = y_n[out, P] columns_n^T, then dW += sum_n G_n.
        cuda::gemm_strided_batched<T>(ctx, false, true, static_cast<int>(out), static_cast<int>(rows),
                                      static_cast<int>(patches), T(1), y_chunk, out_plane, columns, rows * patches,
                                      T(0), weight_grads, weight_size, static_cast<int>(count));
        accumulate_batch_sum_cuda(ctx, weight_grads, count, weight_size, weight.grad.data<T>());
      }
      if (x_grad) {
        // columns_n[K, P] = W^T[K, out] y_n[out, P] (overwrites the unfolded x, already used), then
        // x_grad_n = col2im(columns_n).
        cuda::gemm_strided_batched<T>(ctx, true, false, static_cast<int>(rows), static_cast<int>(patches),
                                      static_cast<int>(out), T(1), weight.value.data<T>(), 0, y_chunk, out_plane, T(0),
                                      columns, rows * patches, static_cast<int>(count));
        col2im_cuda(ctx, columns, g, count, x_grad_values->f32().data<T>() + first * g.image_size());
      }
    }
  });
  if (x_grad_values) x_grad_values->store(ctx);
  if (y_grad_values) y_grad_values->store(ctx);
}

void Convolution::accumulate_bias_grad_cuda(Context& ctx, const Tensor& output_grad) {
  const std::int64_t batch = output_grad.dim(0);
  if (!has_bias_ || batch == 0) return;
  Tensor& bias_grad = parameter("bias").grad;
  const std::int64_t channels = output_grad.dim(1), plane = output_grad.dim(2) * output_grad.dim(3);
  if (output_grad.dtype() == DType::bf16) {  // read natively, summed in f32 (Layer::backward checked f32 parameters)
    accumulate_channel_sums_cuda(ctx, output_grad.data<BFloat16>(), batch, channels, plane, bias_grad.data<float>());
    return;
  }
  dispatch_float(output_grad.dtype(), [&](auto zero) {
    using T = decltype(zero);
    accumulate_channel_sums_cuda(ctx, output_grad.data<T>(), batch, channels, plane, bias_grad.data<T>());
  });
}

}  // namespace plexus::layers

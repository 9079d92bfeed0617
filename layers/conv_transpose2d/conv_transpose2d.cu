// CUDA ConvTranspose2d (math in conv_transpose2d.h). This layer is the
// Conv2d from its output to its input, so when the context allows TF32 the
// implicit-GEMM tensor-core engine (convolution/implicit_gemm.h) runs its forward
// as that Conv2d's backward_data, its input gradient as that Conv2d's forward
// and its weight gradient as that Conv2d's backward_weight, where the engine
// takes the pass (takes_forward / takes_backward_data; a forward onto <= 4
// channels, the RGB image a synthesis transform ends with, runs
// few_channel_conv.h's kernel). Otherwise: cuBLAS
// GEMMs batched over the images of a chunk plus col2im / im2col kernels of
// the output geometry. The chunk is the whole batch unless its scratch
// (columns and per-image weight gradients) would exceed scratch_limit_.
// Scratch buffers are cached in the layer. Every step runs on the context's
// stream.
#include <algorithm>

#include "convolution/channel_ops.h"
#include "convolution/implicit_gemm.h"
#include "convolution/scratch.h"
#include "conv_transpose2d/conv_transpose2d.h"
#include "plexus/cuda/blas.h"

namespace plexus::layers {

implicit_gemm::ConvProblem ConvTranspose2d::conv_problem(const Shape& input_shape) const {
  const ConvGeometry g = geometry(input_shape);  // image = this layer's output
  implicit_gemm::ConvProblem problem;
  problem.batch = input_shape[0];
  problem.in_channels = out_channels_;
  problem.height = g.height;
  problem.width = g.width;
  problem.out_channels = input_shape[1];
  problem.out_height = g.patches_high;
  problem.out_width = g.patches_wide;
  problem.kernel = kernel_;
  problem.stride = stride_;
  problem.padding = padding_;
  return problem;
}

void ConvTranspose2d::forward_cuda(Context& ctx, const ConstTensors& inputs, const MutableTensors& outputs) {
  const Tensor& x = *inputs[0];
  Tensor& y = *outputs[0];
  const ConvGeometry g = geometry(x.shape());
  const std::int64_t batch = x.dim(0), channels = x.dim(1), rows = g.column_rows(), pixels = g.column_cols();
  const std::int64_t in_plane = channels * pixels;  // elements of one input image
  if (batch == 0) return;
  const implicit_gemm::ConvProblem problem = conv_problem(x.shape());
  if (implicit_gemm::supports(ctx, x.dtype(), problem) && implicit_gemm::takes_backward_data(problem)) {
    implicit_gemm::backward_data(ctx, problem, x.data<float>(), parameter("weight").value.data<float>(),
                                 has_bias_ ? parameter("bias").value.data<float>() : nullptr, y.data<float>(),
                                 tensor_core_scratch_);
    return;
  }
  dispatch_float(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const std::int64_t chunk = images_per_cuda_chunk(x.shape(), sizeof(T));
    T* columns = scratch_tensor(columns_, {chunk, rows, pixels}, x.dtype(), ctx.device()).data<T>();
    const T* weight = parameter("weight").value.data<T>();
    for (std::int64_t first = 0; first < batch; first += chunk) {
      const std::int64_t count = std::min(chunk, batch - first);
      // columns_n[out*k*k, H*W] = W^T[out*k*k, C] x_n[C, H*W] (W shared: stride 0), then y_n =
      // col2im(columns_n).
      cuda::gemm_strided_batched<T>(ctx, true, false, static_cast<int>(rows), static_cast<int>(pixels),
                                    static_cast<int>(channels), T(1), weight, 0,
                                    x.data<T>() + first * in_plane, in_plane, T(0), columns, rows * pixels,
                                    static_cast<int>(count));
      col2im_cuda(ctx, columns, g, count, y.data<T>() + first * g.image_size());
    }
    if (has_bias_)
      add_channel_bias_cuda(ctx, parameter("bias").value.data<T>(), batch, out_channels_, g.height * g.width,
                            y.data<T>());
  });
}

void ConvTranspose2d::backward_cuda(Context& ctx, const ConstTensors& inputs, const ConstTensors&,
                                    const ConstTensors& output_grads, const MutableTensors& input_grads) {
  const Tensor& x = *inputs[0];
  const Tensor& dy = *output_grads[0];
  Tensor* dx = input_grads[0];
  const ConvGeometry g = geometry(x.shape());
  const std::int64_t batch = x.dim(0), channels = x.dim(1), rows = g.column_rows(), pixels = g.column_cols();
  const std::int64_t in_plane = channels * pixels;
  const std::int64_t weight_size = channels * rows;
  if (batch == 0) return;
  // The tensor-core engine where it takes the pass, cuBLAS + im2col for the rest.
  const implicit_gemm::ConvProblem problem = conv_problem(x.shape());
  const bool engine = implicit_gemm::supports(ctx, x.dtype(), problem);
  const bool engine_data = engine && implicit_gemm::takes_forward(problem);
  Parameter& weight = parameter("weight");
  if (engine) {
    if (dx && engine_data)
      implicit_gemm::forward(ctx, problem, dy.data<float>(), weight.value.data<float>(), nullptr,
                             dx->data<float>(), tensor_core_scratch_);
    implicit_gemm::backward_weight(ctx, problem, dy.data<float>(), x.data<float>(), weight.grad.data<float>(),
                                   tensor_core_scratch_);
  }
  const bool im2col_weight = !engine, im2col_data = dx && !engine_data;
  dispatch_float(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    if (im2col_weight || im2col_data) {
      const std::int64_t chunk = images_per_cuda_chunk(x.shape(), sizeof(T));
      T* columns = scratch_tensor(columns_, {chunk, rows, pixels}, x.dtype(), ctx.device()).data<T>();
      T* weight_grads =
          im2col_weight ? scratch_tensor(weight_grads_, {chunk, channels, rows}, x.dtype(), ctx.device()).data<T>()
                        : nullptr;
      for (std::int64_t first = 0; first < batch; first += chunk) {
        const std::int64_t count = std::min(chunk, batch - first);
        const T* x_chunk = x.data<T>() + first * in_plane;
        im2col_cuda(ctx, dy.data<T>() + first * g.image_size(), g, count, columns);
        if (im2col_data) {
          // dx_n[C, H*W] = W[C, out*k*k] columns_n[out*k*k, H*W]
          cuda::gemm_strided_batched<T>(ctx, false, false, static_cast<int>(channels),
                                        static_cast<int>(pixels), static_cast<int>(rows), T(1),
                                        weight.value.data<T>(), 0, columns, rows * pixels, T(0),
                                        dx->data<T>() + first * in_plane, in_plane, static_cast<int>(count));
        }
        if (im2col_weight) {
          // G_n[C, out*k*k] = x_n[C, H*W] columns_n^T, then dW += sum_n G_n.
          cuda::gemm_strided_batched<T>(ctx, false, true, static_cast<int>(channels), static_cast<int>(rows),
                                        static_cast<int>(pixels), T(1), x_chunk, in_plane, columns,
                                        rows * pixels, T(0), weight_grads, weight_size, static_cast<int>(count));
          accumulate_batch_sum_cuda(ctx, weight_grads, count, weight_size, weight.grad.data<T>());
        }
      }
    }
    if (has_bias_)
      accumulate_channel_sums_cuda(ctx, dy.data<T>(), batch, out_channels_, g.height * g.width,
                                   parameter("bias").grad.data<T>());
  });
}

}  // namespace plexus::layers

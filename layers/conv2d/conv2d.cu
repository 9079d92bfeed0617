// CUDA Conv2d (math in conv2d.h). When the context allows TF32, the
// implicit-GEMM tensor-core engine (implicit_gemm.h) runs the passes it takes
// without a column buffer (the input gradient onto <= 4 channels, e.g. of
// the 3->128 layer on an RGB image, through few_channel_conv.h's kernel).
// The others (f64, strict f32, the other passes with <= 16 product rows,
// shapes beyond the engine's limits): im2col kernels plus
// cuBLAS GEMMs batched over the images of a chunk. The chunk is the whole
// batch unless its scratch (columns and per-image weight gradients) would
// exceed scratch_limit_.
// Scratch buffers are cached in the layer. Every step runs on the context's
// stream.
#include <algorithm>

#include "convolution/channel_ops.h"
#include "conv2d/conv2d.h"
#include "convolution/implicit_gemm.h"
#include "convolution/scratch.h"
#include "plexus/cuda/blas.h"

namespace plexus::layers {

implicit_gemm::ConvProblem Conv2d::conv_problem(const Shape& input_shape) const {
  const ConvGeometry g = geometry(input_shape);
  implicit_gemm::ConvProblem problem;
  problem.batch = input_shape[0];
  problem.in_channels = g.channels;
  problem.height = g.height;
  problem.width = g.width;
  problem.out_channels = out_channels_;
  problem.out_height = g.patches_high;
  problem.out_width = g.patches_wide;
  problem.kernel = kernel_;
  problem.stride = stride_;
  problem.padding = padding_;
  return problem;
}

void Conv2d::forward_cuda(Context& ctx, const ConstTensors& inputs, const MutableTensors& outputs) {
  const Tensor& x = *inputs[0];
  Tensor& y = *outputs[0];
  const ConvGeometry g = geometry(x.shape());
  const std::int64_t batch = x.dim(0), rows = g.column_rows(), patches = g.column_cols();
  const std::int64_t out_plane = out_channels_ * patches;  // elements of one output image
  if (batch == 0) return;
  const implicit_gemm::ConvProblem problem = conv_problem(x.shape());
  if (implicit_gemm::supports(ctx, x.dtype(), problem) && implicit_gemm::takes_forward(problem)) {
    implicit_gemm::forward(ctx, problem, x.data<float>(), parameter("weight").value.data<float>(),
                           has_bias_ ? parameter("bias").value.data<float>() : nullptr, y.data<float>(),
                           tensor_core_scratch_);
    return;
  }
  dispatch_float(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const std::int64_t chunk = images_per_cuda_chunk(x.shape(), sizeof(T));
    T* columns = scratch_tensor(columns_, {chunk, rows, patches}, x.dtype(), ctx.device()).data<T>();
    const T* weight = parameter("weight").value.data<T>();
    for (std::int64_t first = 0; first < batch; first += chunk) {
      const std::int64_t count = std::min(chunk, batch - first);
      im2col_cuda(ctx, x.data<T>() + first * g.image_size(), g, count, columns);
      // y_n[out, P] = W[out, K] columns_n[K, P] for each image n of the chunk (W shared: stride 0).
      cuda::gemm_strided_batched<T>(ctx, false, false, static_cast<int>(out_channels_),
                                    static_cast<int>(patches), static_cast<int>(rows), T(1), weight, 0,
                                    columns, rows * patches, T(0), y.data<T>() + first * out_plane, out_plane,
                                    static_cast<int>(count));
    }
    if (has_bias_)
      add_channel_bias_cuda(ctx, parameter("bias").value.data<T>(), batch, out_channels_, patches,
                            y.data<T>());
  });
}

void Conv2d::backward_cuda(Context& ctx, const ConstTensors& inputs, const ConstTensors&,
                           const ConstTensors& output_grads, const MutableTensors& input_grads) {
  const Tensor& x = *inputs[0];
  const Tensor& dy = *output_grads[0];
  Tensor* dx = input_grads[0];
  const ConvGeometry g = geometry(x.shape());
  const std::int64_t batch = x.dim(0), rows = g.column_rows(), patches = g.column_cols();
  const std::int64_t out_plane = out_channels_ * patches;
  const std::int64_t weight_size = out_channels_ * rows;
  if (batch == 0) return;
  // The tensor-core engine where it takes the pass, im2col + cuBLAS for the rest.
  const implicit_gemm::ConvProblem problem = conv_problem(x.shape());
  const bool engine = implicit_gemm::supports(ctx, x.dtype(), problem);
  const bool engine_data = engine && implicit_gemm::takes_backward_data(problem);
  Parameter& weight = parameter("weight");
  if (engine) {
    implicit_gemm::backward_weight(ctx, problem, x.data<float>(), dy.data<float>(), weight.grad.data<float>(),
                                   tensor_core_scratch_);
    if (dx && engine_data)
      implicit_gemm::backward_data(ctx, problem, dy.data<float>(), weight.value.data<float>(), nullptr,
                                   dx->data<float>(), tensor_core_scratch_);
  }
  const bool im2col_weight = !engine, im2col_data = dx && !engine_data;
  dispatch_float(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    if (im2col_weight || im2col_data) {
      const std::int64_t chunk = images_per_cuda_chunk(x.shape(), sizeof(T));
      T* columns = scratch_tensor(columns_, {chunk, rows, patches}, x.dtype(), ctx.device()).data<T>();
      T* weight_grads =
          im2col_weight
              ? scratch_tensor(weight_grads_, {chunk, out_channels_, rows}, x.dtype(), ctx.device()).data<T>()
              : nullptr;
      for (std::int64_t first = 0; first < batch; first += chunk) {
        const std::int64_t count = std::min(chunk, batch - first);
        const T* dy_chunk = dy.data<T>() + first * out_plane;
        if (im2col_weight) {
          im2col_cuda(ctx, x.data<T>() + first * g.image_size(), g, count, columns);
          // G_n[out, K] = dy_n[out, P] columns_n^T, then dW += sum_n G_n.
          cuda::gemm_strided_batched<T>(ctx, false, true, static_cast<int>(out_channels_),
                                        static_cast<int>(rows), static_cast<int>(patches), T(1), dy_chunk,
                                        out_plane, columns, rows * patches, T(0), weight_grads, weight_size,
                                        static_cast<int>(count));
          accumulate_batch_sum_cuda(ctx, weight_grads, count, weight_size, weight.grad.data<T>());
        }
        if (im2col_data) {
          // columns_n[K, P] = W^T[K, out] dy_n[out, P] (overwrites the unfolded input, already used), then
          // dx_n = col2im(columns_n).
          cuda::gemm_strided_batched<T>(ctx, true, false, static_cast<int>(rows), static_cast<int>(patches),
                                        static_cast<int>(out_channels_), T(1), weight.value.data<T>(), 0,
                                        dy_chunk, out_plane, T(0), columns, rows * patches,
                                        static_cast<int>(count));
          col2im_cuda(ctx, columns, g, count, dx->data<T>() + first * g.image_size());
        }
      }
    }
    if (has_bias_)
      accumulate_channel_sums_cuda(ctx, dy.data<T>(), batch, out_channels_, patches,
                                   parameter("bias").grad.data<T>());
  });
}

}  // namespace plexus::layers

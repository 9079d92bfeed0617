// CUDA ConvTranspose2d (math in conv_transpose2d.h): convolution.h's passes
// with X the output. So when the context allows TF32 or BF16 the
// implicit-GEMM tensor-core engine (convolution/implicit_gemm.h) runs this
// layer's forward as the engine's backward_data, its input gradient as the
// engine's forward and its weight gradient as the engine's backward_weight,
// where the engine takes the pass (a forward onto <= 4 channels, the RGB
// image a synthesis transform ends with, runs few_channel_conv.h's kernel);
// the others run cuBLAS plus col2im / im2col of the output geometry.
#include "conv_transpose2d/conv_transpose2d.h"

namespace plexus::layers {

void ConvTranspose2d::forward_cuda(Context& ctx, const ConstTensors& inputs, const MutableTensors& outputs) {
  conv_backward_data_cuda(ctx, *inputs[0], /*with_bias=*/true, output_activation_, *outputs[0]);
}

void ConvTranspose2d::backward_cuda(Context& ctx, const ConstTensors& inputs, const ConstTensors&,
                                    const ConstTensors& output_grads, const MutableTensors& input_grads) {
  conv_backward_cuda(ctx, *output_grads[0], *inputs[0], /*x_grad=*/nullptr, /*y_grad=*/input_grads[0],
                     *output_grads[0]);
}

}  // namespace plexus::layers

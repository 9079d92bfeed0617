// CUDA Conv2d (math in conv2d.h): convolution.h's passes with X the input.
// When the context allows TF32 or BF16 the implicit-GEMM tensor-core engine
// (convolution/implicit_gemm.h) runs the passes it takes (the input gradient
// onto <= 4 channels, e.g. of the 3->128 layer on an RGB image, through
// few_channel_conv.h's kernel); the others run im2col + cuBLAS.
#include "conv2d/conv2d.h"

namespace plexus::layers {

void Conv2d::forward_cuda(Context& ctx, const ConstTensors& inputs, const MutableTensors& outputs) {
  conv_forward_cuda(ctx, *inputs[0], /*with_bias=*/true, output_activation_, *outputs[0]);
}

void Conv2d::backward_cuda(Context& ctx, const ConstTensors& inputs, const ConstTensors&,
                           const ConstTensors& output_grads, const MutableTensors& input_grads) {
  conv_backward_cuda(ctx, *inputs[0], *output_grads[0], /*x_grad=*/input_grads[0], /*y_grad=*/nullptr,
                     *output_grads[0]);
}

}  // namespace plexus::layers

#pragma once
// Convolutions with few channels on one side: the layers next to RGB images
// (Conv2d 3->128 of an analysis transform, ConvTranspose2d 128->3 of a
// synthesis transform). In the implicit-GEMM engine's terms (implicit_gemm.h)
// their K or M is tiny (Ci*k*k = 75, or M = Ci = 3), so a tile of the engine
// spends its time gathering one element per copy and filling 128-row tiles
// with zeros, while the pass itself is bound by the one large tensor it reads
// or writes (e.g. 134 MB of 128-channel output at 128x128, batch 16). These
// kernels instead stage the few-channel image rows a tile needs in shared
// memory once and read tensor-core fragments straight from them (the patch
// matrix is never formed), so each pass costs about one read or write of its
// large tensor.
//
// Same conventions as the engine: Conv2d terms (X [N, Ci, H, W] the few-
// channel side, Y [N, Co, Ho, Wo] the many-channel side), f32 accumulation,
// products at the Context's precision (TF32, or BF16 operands rounded to
// nearest even), NCHW tensors, f32 parameters. Y (or dY) is f32 or bf16,
// read and written natively: it is the large tensor each pass is bound by,
// and a bf16 Y halves those bytes (read widened exactly into the same f32
// operands; written as the f32 result rounded to nearest even). X is f32:
// the engine hands these kernels an f32 stand-in of a bf16 X (implicit_gemm.h),
// a small tensor at <= kMaxChannels channels.
#include "convolution/implicit_gemm.h"
#include "plexus/tensor.h"

namespace plexus::layers::few_channel_conv {

// The most channels the few-channel side may have, the largest kernel, and
// the most taps Ci*k*k (forward and backward_weight; e.g. 3 channels at 9x9).
inline constexpr int kMaxChannels = 4;
inline constexpr int kMaxKernel = 9;
inline constexpr int kMaxTaps = 256;

// Whether forward (Y = activation(conv(X, W) + bias), X with <= kMaxChannels channels)
// runs here; the caller has already checked implicit_gemm::supports().
bool takes_forward(const implicit_gemm::ConvProblem& problem);
void forward(const Context& ctx, const implicit_gemm::ConvProblem& problem, const float* x, const float* weight,
             const implicit_gemm::Epilogue& epilogue, Tensor& y);

// Whether backward_data (X = conv^T(Y, W) + bias, X with <= kMaxChannels
// channels: a ConvTranspose2d's forward onto an image) runs here.
bool takes_backward_data(const implicit_gemm::ConvProblem& problem);
void backward_data(const Context& ctx, const implicit_gemm::ConvProblem& problem, const Tensor& y, const float* weight,
                   const float* bias, float* x);

// Whether backward_weight (dW += correlation of Y with X, X with <=
// kMaxChannels channels) runs here. partial_sums: scratch for the per-block
// sums of the pixel sum (reused while shapes stay the same).
bool takes_backward_weight(const implicit_gemm::ConvProblem& problem);
void backward_weight(const Context& ctx, const implicit_gemm::ConvProblem& problem, const float* x, const Tensor& y,
                     float* weight_grad, Tensor& partial_sums);

}  // namespace plexus::layers::few_channel_conv

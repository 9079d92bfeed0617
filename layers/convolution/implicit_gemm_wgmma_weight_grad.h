#pragma once
// The weight gradient on Hopper: wgmma products from TMA-loaded tiles
// (implicit_gemm_wgmma_weight_grad.cu). Internal to the engine.
#include "convolution/implicit_gemm.h"

namespace plexus::layers::implicit_gemm::detail {

// Whether the Hopper kernel takes the problem at this precision (bf16: BF16
// products, else TF32): stride <= 4, >= 64 input and output channels, and
// output rows of whole 32-pixel tiles at TF32, 16-pixel tiles at bf16 (two
// or four rows per K tile where the width is not a multiple of 64).
// The caller also checks uses_wgmma().
bool wgmma_weight_grad_fits(const ConvProblem& problem, bool bf16);

// weight_grad += correlation of Y with X, as backward_weight. x and y f32 or
// bf16 each: the copies read either natively. kept, when not null, holds x's
// NHWC bf16 copy, which the BF16 kernel then reads instead of its own.
void wgmma_weight_grad(const Context& ctx, const ConvProblem& problem, const Tensor& x, const Tensor& y,
                       float* weight_grad, Scratch& scratch, const KeptSource* kept);

}  // namespace plexus::layers::implicit_gemm::detail

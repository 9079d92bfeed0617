#pragma once
// Implicit-GEMM 2-D convolution on tensor cores (f32 or bf16 activations, f32
// parameters, f32 accumulation; TF32 mma.sync m16n8k8 or BF16 m16n8k16, see
// below). One engine, three index mappings, in the terms
// of a Conv2d with input X [N, Ci, H, W], weight W [Co, Ci, k, k] and output
// Y [N, Co, Ho, Wo], Ho = (H + 2p - k)/s + 1:
//   forward          Y[n, o, a, b]  = bias[o] + sum_{c,i,j} W[o,c,i,j] X[n, c, a*s-p+i, b*s-p+j]
//   backward_data    X[n, c, h, w]  = bias[c] + sum_{o,i,j} W[o,c,i,j] Y[n, o, (h+p-i)/s, (w+p-j)/s]
//                                     (only terms where s divides h+p-i and w+p-j)
//   backward_weight  dW[o, c, i, j] += sum_{n,a,b} Y[n, o, a, b] X[n, c, a*s-p+i, b*s-p+j]
// ConvTranspose2d is the same three with the roles swapped (its forward is
// backward_data, its input gradient is forward, its weight gradient is
// backward_weight with X and Y exchanged), so both layers share this engine.
//
// No column matrix is materialised: each thread block gathers its tile of the
// patch matrix straight from the source tensor into shared memory (cp.async,
// zero-filled outside the image), multi-buffered so loads overlap the
// products. Tensors are NCHW at this API; when the gathered source (X in
// forward, Y in backward_data) has >= kTapMajorChannels channels, the pass
// first copies it to NHWC (channels padded with zeros to a whole stage), so
// that the channels of one pixel are contiguous and a tile is gathered 16
// bytes per copy instead of 4 (in NCHW they lie H*W apart, and one copy per
// element made the gather, not the products, bound the kernel); the copy
// costs one read and one write of the source per pass.
// backward_data runs one GEMM per output phase (h mod s, w mod s),
// where only every s-th kernel tap contributes, so no product is spent on the
// zeros a strided transpose would insert. backward_weight splits the long
// pixel sum over blocks and reduces the partial sums deterministically (as do
// the other two passes when their output is too small to fill the GPU); when
// Ci is a multiple of 128 it first copies X to NHWC (Scratch), where the 128
// channels of one pixel and tap are contiguous, and loads them 16 bytes per
// cp.async instead of one element per copy.
//
// The product follows the Context's precision: under tf32 the tensor cores
// read each f32 operand as TF32 (10 mantissa bits, truncated: ~1e-3 relative
// per product); under bf16 each operand is rounded to bf16 (7 mantissa bits,
// round to nearest even: within 4e-3 relative). forward, backward_data and
// the NCHW weight gradient round as the warp forms its mma fragments from f32
// tiles in shared memory (same tiles, gathers and epilogues as tf32: only the
// mma instruction and that rounding differ). The tap-major weight gradient
// (Ci a multiple of 128) rounds once instead, into bf16 copies of X (NHWC)
// and Y (channel rows), and stages bf16 tiles: twice the pixels per byte,
// fragments by ldmatrix with no conversion in the inner loop.
// Strict f32 never comes here.
//
// Activations stored in bf16 (LayerTraits::stores_bf16): each of X and Y may be f32
// or bf16, independently; the weight, bias, weight gradient and every
// partial sum stay f32. Read natively, at 2 bytes per element and widened
// exactly: the tap-major NHWC copies (forward's X, backward_data's Y,
// backward_weight's X), the bf16 channel rows of backward_weight's Y, the
// Hopper weight gradient's phase and shifted-row copies, and the
// few-channel kernels' many-channel side Y. Written natively: forward's Y
// and backward_data's X, by the gather epilogue and the split-K reduction,
// and the few-channel forward's Y, each f32 sum (plus bias) rounded to
// nearest even. Read through f32 stand-ins (activation_storage.h: widened
// into an f32 scratch first): the flat-K gather's NCHW source, the
// few-channel side X, and the x and y the NCHW weight gradient kernels read
// element by element (Ci not a multiple of 128, and the tap-major TF32
// weight gradient's y); the few-channel backward_data writes an f32 scratch
// then rounded into a bf16 X. Either way a pass computes on the same f32 values as with f32
// tensors of those values (the products round them to TF32 or bf16, which
// a bf16 value survives unchanged), so a bf16 result is the f32 result
// rounded to nearest even, and the weight gradient is the same bits.
//
// Layers with at most 4 channels on X's side (the first layer of an
// analysis transform reading an RGB image, or a synthesis transform's last
// ConvTranspose2d writing one) enter through these same functions but run
// few_channel_conv.h's kernels: with K = Ci*k*k that small, staging the
// image rows a tile needs and reading fragments straight from them beats the
// gather.
//
// On Hopper (compute capability 9.0, built with sm_90a code; uses_wgmma)
// forward and backward_data with a tap-major K run wgmma instead
// (implicit_gemm_wgmma.cu): the warpgroup MMA reads both operands from
// 128-byte swizzled tiles in shared memory instead of registers. TF32 reads
// the same f32 operands; BF16 reads an NHWC copy and a packed weight already
// rounded to bf16 (nearest even, as above), half the bytes per stage. Same
// parts, tap tables, K splits and epilogue; the results differ from the
// mma.sync kernels' only in the order of the f32 additions.
#include <cstdint>

#include "plexus/context.h"
#include "plexus/layer.h"
#include "plexus/tensor.h"

namespace plexus::layers::implicit_gemm {

// The engine's limits (supports() checks them).
inline constexpr int kTapAlign = 32;   // tap tables are padded to whole pipeline stages
inline constexpr int kMaxPhases = 16;  // backward_data phases: stride <= 4
inline constexpr int kMaxTaps = 7168;  // entries of one tap table (8 bytes each in shared memory)
// Sources with at least this many channels use a tap-major K, gathered from an
// NHWC copy (implicit_gemm_gather.cu).
inline constexpr int kTapMajorChannels = 32;
inline constexpr int kMaxExtent = 16000;  // image height and width (tap offsets are 16-bit)

namespace detail {
// a / b rounded up, and a rounded up to a multiple of b (b > 0): the
// engine's tile and padding arithmetic, host side.
inline long long ceil_div(long long a, long long b) { return (a + b - 1) / b; }
inline long long round_up(long long a, long long b) { return ceil_div(a, b) * b; }
}  // namespace detail

// A convolution in Conv2d terms (see above). For ConvTranspose2d the "input"
// X is its output and Y its input.
struct ConvProblem {
  std::int64_t batch = 0;
  std::int64_t in_channels = 0;   // Ci
  std::int64_t height = 0;        // H
  std::int64_t width = 0;         // W
  std::int64_t out_channels = 0;  // Co
  std::int64_t out_height = 0;    // Ho
  std::int64_t out_width = 0;     // Wo
  std::int64_t kernel = 1;
  std::int64_t stride = 1;
  std::int64_t padding = 0;
};

// Buffers the engine keeps between calls (packed weights, NHWC copies of
// the gathered source and of the weight gradient's input, split-K partial
// sums): one set per context, shared by every convolution on it
// (Context::shared_state), each buffer grown to the largest use and filled
// by each pass before it is read (grown_scratch in scratch.h). One buffer
// per kind of use, so the passes of one layer never overwrite each other's.
// backward_weight runs beside the input gradient and the next layers'
// backward (Convolution::conv_backward_cuda), so no buffer it uses is also
// used by forward or backward_data.
struct Scratch {
  Tensor forward_weight;            // the weight packed for forward
  Tensor forward_source;            // forward's NHWC copy of X (tap-major K only)
  Tensor forward_source_f32;        // forward's f32 stand-in of a bf16 X (flat K, few channels)
  Tensor forward_sums;              // forward's split-K partial sums
  Tensor backward_data_weight;      // the weight re-packed per phase for backward_data
  Tensor backward_data_source;      // backward_data's NHWC copy of Y (tap-major K only)
  Tensor backward_data_source_f32;  // backward_data's f32 stand-in of a bf16 Y (flat K)
  Tensor backward_data_dest_f32;    // backward_data's f32 stand-in of a bf16 X (few channels)
  Tensor backward_data_sums;        // backward_data's split-K partial sums
  Tensor weight_sums;               // backward_weight's split-K partial sums
  Tensor weight_source;             // backward_weight's NHWC copy of X (Ci a multiple of 128 only)
  Tensor weight_source_bf16;        // the same in bf16 (bf16 products), 16-bit patterns in an f32 tensor
  Tensor weight_rows_bf16;          // backward_weight's bf16 channel rows of Y (same cases)
  Tensor weight_phases;             // backward_weight on Hopper: X split by stride phase, or X in NHWC (bf16)
  Tensor weight_shifted;            // backward_weight on Hopper: Y's rows shifted per tap column offset, or Y in bf16
  Tensor weight_x_f32;              // backward_weight's f32 stand-in of a bf16 X (NCHW kernels, few channels)
  Tensor weight_y_f32;              // backward_weight's f32 stand-in of a bf16 Y (NCHW kernels)
};

// True when the engine takes this problem: f32 (the parameters' dtype; the
// activations may be stored in bf16), a CUDA context whose precision is tf32
// or bf16 (Context::allow_tf32), stride <= 4, every per-image tensor and the
// kernel-tap tables within the engine's 32-bit index and shared-memory limits. Otherwise callers use the
// im2col + cuBLAS path. Defined in implicit_gemm.cpp, so CPU-only builds
// link it too (there it is always false: no CUDA context exists).
bool supports(const Context& ctx, DType dtype, const ConvProblem& problem);

// Whether the engine runs forward / backward_data (given supports()): they
// gather one input element per product row, so with few rows (Co resp.
// Ci <= kMinGatherRows: the layers next to RGB images) the gather costs more
// than it saves and im2col + cuBLAS is faster. backward_data with Ci <=
// few_channel_conv::kMaxChannels (a ConvTranspose2d onto an image) is taken
// anyway where few_channel_conv::takes_backward_data says so: backward_data
// hands it to that kernel (few_channel_conv.h). backward_weight takes every
// supported problem.
inline constexpr int kMinGatherRows = 16;
inline bool takes_forward(const ConvProblem& problem) { return problem.out_channels > kMinGatherRows; }
bool takes_backward_data(const ConvProblem& problem);  // implicit_gemm.cpp

// Whether forward and backward_data of tap-major problems (source channels
// >= kTapMajorChannels) run the Hopper wgmma kernels on ctx's device:
// compute capability 9.0, a build with sm_90a code (the build includes
// architecture 90), and the environment variable PLEXUS_CONV_WGMMA not "0"
// (set it to 0 to compare with the mma.sync kernels). Decided once per
// process and device. Only in CUDA builds.
bool uses_wgmma(const Context& ctx);

// A layer's own NHWC bf16 copy of X (channels padded as forward's gather
// pads them), kept from the pass that makes it to backward_weight, whose
// Hopper BF16 kernel then reads it instead of copying X again: forward
// makes it when given one (a training step's forward), keep_source makes it
// in a backward that runs forward on X (ConvTranspose2d's input gradient,
// which then reads it too). made_from is X's data when it was made; the
// layer sets it to nullptr before each forward and after each backward, so
// a copy is only read between the two passes of one step, for that X.
struct KeptSource {
  Tensor buffer;                    // bf16 bit patterns in an f32 tensor
  const void* made_from = nullptr;  // nullptr: holds nothing
  Shape shape;
  int channel_pad = 0;
  bool holds(const Tensor& x) const { return made_from && made_from == x.raw_data() && shape == x.shape(); }
};

// What forward and backward_data do to each f32 sum before storing it: add
// the bias of its channel (when not null), then apply the activation (when
// active; fused_activation.cuh), in their tile store, in the split-K sum,
// and in the few-channel kernels' stores (the few-channel backward_data:
// in place on its f32 result before it is stored).
struct Epilogue {
  const float* bias = nullptr;
  FusedActivation activation;
};

// The passes. x [N, Ci, H, W] and y [N, Co, Ho, Wo] on ctx's device, each
// f32 or bf16 (above); weight, bias and weight_grad f32.
// Y = activation(conv(X, W) (+ bias[o])); overwrites every element of y.
// With `kept`, where the pass copies X to NHWC bf16 (tap-major wgmma at
// bf16), the copy is kept's (read as it is when kept already holds x).
void forward(Context& ctx, const ConvProblem& problem, const Tensor& x, const float* weight, const Epilogue& epilogue,
             Tensor& y, Scratch& scratch, KeptSource* kept = nullptr);
// Makes kept hold x's NHWC bf16 copy where forward would copy X so.
void keep_source(Context& ctx, const ConvProblem& problem, const Tensor& x, KeptSource& kept);
// X = activation(conv^T(Y, W) (+ bias[c])); overwrites every element of x.
void backward_data(Context& ctx, const ConvProblem& problem, const Tensor& y, const float* weight,
                   const Epilogue& epilogue, Tensor& x, Scratch& scratch);
// weight_grad += correlation of Y with X (shape [Co, Ci, k, k]). Reads
// kept's copy of X where kept holds x and the Hopper BF16 kernel runs.
void backward_weight(Context& ctx, const ConvProblem& problem, const Tensor& x, const Tensor& y, float* weight_grad,
                     Scratch& scratch, const KeptSource* kept = nullptr);

}  // namespace plexus::layers::implicit_gemm

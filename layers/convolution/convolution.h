#pragma once
// Convolution: what Conv2d and ConvTranspose2d share, as Caffe's
// BaseConvolutionLayer: their parameters, shape checks, weight, scratch, and
// the three passes of a 2-D convolution, written once in Conv2d terms
// (implicit_gemm.h): X [N, Ci, H, W], the image im2col unfolds (im2col.h),
// Y [N, Co, Ph, Pw], one pixel per kernel position, and the weight
// [Co, Ci, k, k] viewed as the matrix W [Co, Ci*k*k]. Per image n:
//   forward          Y_n = W im2col(X_n)        (+ bias per channel of Y)
//   backward_data    X_n = col2im(W^T Y_n)      (+ bias per channel of X)
//   backward_weight  dW += Y_n im2col(X_n)^T
// With groups G (params "groups", "dilation"), X's and Y's channels split
// into G equal blocks, block g of Y reading block g of X only: the weight is
// [Co, Ci/G, k, k], W_g its rows g*Co/G.. as [Co/G, (Ci/G)*k*k], and each
// pass above runs per group on im2col's rows g*(Ci/G)*k*k.. (the group's
// channels); dilation d spaces the taps d pixels apart. groups = dilation = 1
// runs the paths below; any other runs grouped_convolution.cpp / .cu: per
// group im2col + Eigen / cuBLAS, or, when each channel of Y reads a single
// channel of X (depthwise: Ci/G = 1), direct kernels without columns.
// A layer is an index mapping onto these. Conv2d's X is its input and Y its
// output. ConvTranspose2d's X is its output and Y its input, so its forward
// is backward_data, its input gradient forward, and its weight
// [C, out, k, k] (PyTorch's layout) is the same [Co, Ci, k, k].
//
// On the CPU the passes run with Eigen. forward and backward_data run on
// blocks of rows of each image (convolution.cpp says how large), the blocks
// of all images in parallel, so that one image uses every thread and its
// column matrix is never built whole (the transposed pass's block, in chunks
// of patches when it is large); conv_backward runs per image (images
// in parallel, sums over images in image order). On CUDA the implicit-GEMM tensor-core engine
// (implicit_gemm.h) runs the passes it takes, without a column buffer; the
// rest (f64, strict f32, passes with few product rows, shapes beyond the
// engine's limits) run im2col / col2im kernels plus cuBLAS GEMMs batched over
// the images of a chunk. The chunk is the whole batch unless its scratch
// (columns and per-image weight gradients) would exceed the scratch limit.
// Scratch buffers are cached in the layer (scratch.h). Every step runs on
// the context's stream.
//
// On CUDA the layers store activations in bf16 (LayerTraits::stores_bf16): with f32
// parameters each of X, Y and their gradients may be f32 or bf16,
// independently, and every pass computes in f32 as with f32 tensors of the
// same values. The engine reads and writes bf16 natively in its tap-major
// copies, its gather epilogue, its weight gradient's copies and the
// few-channel kernels' many-channel side, and through
// f32 stand-ins elsewhere (implicit_gemm.h); the bias gradient reads a bf16
// output gradient natively; the im2col + cuBLAS passes run on f32 stand-ins
// (activation_storage.h). The CPU passes take f32 or f64 tensors only.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "convolution/im2col.h"
#include "convolution/implicit_gemm.h"
#include "plexus/layer.h"
#include "plexus/layer_config.h"

namespace plexus::layers {

// The CPU forward and backward_data passes' blocks of rows (convolution.cpp
// says why these sizes), for every groups and dilation:
// patch rows (rows of Y) per block of the forward;
std::int64_t cpu_patch_rows_per_block(const ConvGeometry& g);
// image rows (rows of X) per block of backward_data: a multiple of the
// stride, covering the forward's patches and kHaloShare times the rows one
// kernel reaches (dilation * (k - 1)).
std::int64_t cpu_image_rows_per_block(const ConvGeometry& g);

// A CPU pass's blocks of `rows_per_block` rows of a tensor of `height` rows
// whose first row is row `origin` of a whole image (0: the tensor is the
// whole image): they end where origin + row is a multiple of rows_per_block,
// so that a part of an image (a band of rows) cuts its rows into the whole
// image's blocks, with a shorter block at each end of the part.
struct CpuRowBlocks {
  CpuRowBlocks(std::int64_t height, std::int64_t rows_per_block, std::int64_t origin);
  std::int64_t count() const { return count_; }
  std::int64_t first(std::int64_t block) const { return block < lead_ ? 0 : head_ + (block - lead_) * rows_per_block_; }
  std::int64_t end(std::int64_t block) const {
    return block < lead_ ? head_ : std::min(height_, first(block) + rows_per_block_);
  }

 private:
  std::int64_t height_, rows_per_block_;
  std::int64_t head_;  // rows before the first whole block's start
  std::int64_t lead_;  // 1 when head_ > 0: a shorter first block
  std::int64_t count_;
};

class Convolution : public Layer {
 public:
  // Declares weight [Co, Ci, k, k] (Conv2d: [out, C, k, k]; ConvTranspose2d:
  // [C, out, k, k]) and bias [out], both U(-1/sqrt(Ci*k*k), 1/sqrt(Ci*k*k))
  // as in PyTorch, whose fan_in is weight.size(1)*k*k for both layers.
  void create_parameters(const std::vector<Shape>& inputs) override;
  LayerTraits traits(Device device) const override {
    LayerTraits traits;
    traits.has_cuda = PLEXUS_WITH_CUDA;
    traits.cuda_graph_capturable = true;
    // On CUDA every activation tensor may be f32 or bf16 (above), and the Net
    // may store bf16 around every convolution: next to an RGB image too, where
    // the few-channel kernels read and write the many-channel side natively
    // (the image side, an input or a loss's operand, stays f32 in the bundled
    // models).
    traits.accepts_bf16 = PLEXUS_WITH_CUDA && device.is_cuda();
    traits.stores_bf16 = traits.accepts_bf16;
    // The CPU forward gives its input's rows back as it finishes with them
    // when told it may (ForwardOptions::discard_input).
    // Forward applies a fused activation (ReLU, LeakyReLU: Net::set_activation_fusion)
    // to each output value after the bias, on both devices: on CUDA in the
    // engine's epilogues (the gather's tile store, the split-K sum, the
    // few-channel forward's store) or in the bias pass of the other paths.
    // Backward reads no output.
    traits.applies_output_activation = true;
    return traits;
  }
  // Caps the CUDA scratch (column buffer plus per-image weight gradients); a
  // batch whose scratch would exceed it runs in chunks of images (default
  // 512 MiB; tests lower it to exercise the chunking).
  void set_scratch_limit(std::size_t bytes) { scratch_limit_ = bytes; }
  // Caps the columns of one block of the CPU transposed pass (backward_data:
  // ConvTranspose2d's forward), computed in chunks of patches when larger,
  // with the same values (convolution.cpp says why). Default 16 MiB; tests
  // lower it to exercise the chunks.
  void set_cpu_chunk_bytes(std::size_t bytes) { cpu_chunk_bytes_ = bytes; }
  // The CPU forward's blocks of output rows (CpuRowBlocks) start where row
  // `origin` of a whole image, this output's first row when the input is a
  // band of that image's rows, plus the row is a multiple of the block (0,
  // the default: from the first row). Each output row whose whole-image
  // block lies whole in the band then gets the bits it gets in the whole
  // image (a block's product sums its entries in an order that depends on
  // the block's shape).
  void set_cpu_block_origin(std::int64_t origin) { cpu_block_origin_ = origin; }

 protected:
  // Which of the layer's tensors is X, the image im2col unfolds.
  enum class ImageSide { kInput /* Conv2d */, kOutput /* ConvTranspose2d */ };
  // Reads out_channels, kernel (square), stride = 1, padding = 0, then, for
  // ImageSide::kOutput only, output_padding = 0, then groups = 1 (dividing
  // out_channels), dilation = 1, bias = true.
  Convolution(LayerConfig& config, ImageSide image_side);

  // The checks both layers make on their inputs: one input [N, C, H, W] with
  // C, H, W >= 1, C divisible by groups and the weight's input channels, sides within
  // limits::kMaxTensorElements (so that the geometry's arithmetic cannot
  // overflow). Returns that input's shape.
  const Shape& checked_input(const std::vector<Shape>& inputs) const;
  // Fails unless `geometry`'s column matrix and image fit the tensor limits.
  void check_column_size(const Shape& input_shape, const ConvGeometry& geometry) const;

  // The passes in Conv2d terms (above): x is X and y is Y, NCHW, batch first.
  // with_bias adds the bias (when the layer has one) per channel of the
  // tensor written, and `activation` is then applied to it. conv_backward adds dW += sum_n y_n im2col(x_n)^T and
  // writes the layer's input gradient where asked: x_grad = col2im(W^T y)
  // (Conv2d's) or y_grad = W im2col(x) (ConvTranspose2d's, from the same
  // im2col). accumulate_bias_grad adds the per-channel sums of the layer's
  // output gradient to bias.grad (when the layer has a bias).
  // discard_x / discard_y: the pass reads x / y for the last time and gives
  // its rows back to the system as it finishes with them (run_blocks).
  void conv_forward_cpu(const Tensor& x, bool with_bias, const FusedActivation& activation, Tensor& y, bool discard_x);
  void conv_backward_data_cpu(const Tensor& y, bool with_bias, const FusedActivation& activation, Tensor& x,
                              bool discard_y);
  void conv_backward_cpu(const Tensor& x, const Tensor& y, Tensor* x_grad, Tensor* y_grad);
  void accumulate_bias_grad_cpu(const Tensor& output_grad);
#if PLEXUS_WITH_CUDA
  void conv_forward_cuda(Context& ctx, const Tensor& x, bool with_bias, const FusedActivation& activation, Tensor& y);
  void conv_backward_data_cuda(Context& ctx, const Tensor& y, bool with_bias, const FusedActivation& activation,
                               Tensor& x);
  // conv_backward_cuda also adds the bias gradient from output_grad (the
  // layer's output gradient: y for Conv2d, x for ConvTranspose2d); the
  // parameter gradients run beside the input gradient (cuda::Branch; inside
  // Net::backward also beside the next layers' backward).
  void conv_backward_cuda(Context& ctx, const Tensor& x, const Tensor& y, Tensor* x_grad, Tensor* y_grad,
                          const Tensor& output_grad);
  void accumulate_bias_grad_cuda(Context& ctx, const Tensor& output_grad);
#endif

  std::int64_t out_channels_;
  std::int64_t kernel_;
  std::int64_t stride_;
  std::int64_t padding_;
  std::int64_t output_padding_;  // ConvTranspose2d's; 0 for Conv2d, which has no such parameter
  std::int64_t groups_;          // channel groups (above)
  std::int64_t dilation_;        // pixels between kernel taps
  bool has_bias_;
  // The CUDA parameter gradients run on the stream itself, never on a branch
  // beside it, so that a pass queued after conv_backward_cuda sees them (a
  // masked Conv2d zeroes its masked taps' gradient).
  bool parameter_gradients_inline_ = false;
  // X's NHWC copy from a training forward (or from a ConvTranspose2d's
  // backward), read by the weight gradient of the same step.
  implicit_gemm::KeptSource kept_source_;

 private:
  // The im2col geometry of the pass on X [N, Ci, H, W] and Y [N, Co, Ph, Pw].
  ConvGeometry geometry(const Shape& x, const Shape& y) const;
  // The tensor-core engine's description of that pass (CUDA only).
  implicit_gemm::ConvProblem conv_problem(const Shape& x, const Shape& y) const;
  // Images per CUDA chunk: their columns and per-image weight gradients fit
  // in scratch_limit_. The same in every pass, so the cached scratch keeps
  // its shape.
  std::int64_t images_per_cuda_chunk(const ConvGeometry& geometry, std::int64_t out_channels, std::int64_t batch,
                                     std::size_t element_size) const;
  // The im2col + cuBLAS part of conv_backward_cuda: the weight gradient
  // unless the engine ran it, and the input gradient asked for.
  void conv_backward_im2col_cuda(Context& ctx, const Tensor& x, const Tensor& y, bool weight_grad, Tensor* x_grad,
                                 Tensor* y_grad);

  // The passes for groups or dilation other than 1 (grouped_convolution.cpp
  // and .cu), with the arguments of the passes above.
  bool grouped_or_dilated() const { return groups_ != 1 || dilation_ != 1; }
  // Depthwise: each channel of Y reads one channel of X (Ci/G = 1), which
  // direct kernels run (a channel multiplier Co/G > 1 included).
  bool depthwise(const Shape& x) const { return x[1] == groups_; }
  void grouped_forward_cpu(const Tensor& x, bool with_bias, const FusedActivation& activation, Tensor& y);
  void grouped_backward_data_cpu(const Tensor& y, bool with_bias, const FusedActivation& activation, Tensor& x);
  void grouped_backward_cpu(const Tensor& x, const Tensor& y, Tensor* x_grad, Tensor* y_grad);
#if PLEXUS_WITH_CUDA
  void grouped_forward_cuda(Context& ctx, const Tensor& x, bool with_bias, const FusedActivation& activation,
                            Tensor& y);
  void grouped_backward_data_cuda(Context& ctx, const Tensor& y, bool with_bias, const FusedActivation& activation,
                                  Tensor& x);
  void grouped_backward_cuda(Context& ctx, const Tensor& x, const Tensor& y, Tensor* x_grad, Tensor* y_grad,
                             const Tensor& output_grad);
#endif

  ImageSide image_side_;
  std::size_t scratch_limit_ = std::size_t(512) << 20;
  std::size_t cpu_chunk_bytes_ = std::size_t(16) << 20;
  std::int64_t cpu_block_origin_ = 0;
  Shape weight_shape_;  // set by create_parameters; empty before
};

// The CUDA scratch of the im2col + cuBLAS passes, shared by every
// convolution of a context (Context::shared_state, grown_scratch in
// scratch.h): each pass fills it before reading it.
struct ColumnScratch {
  Tensor columns;       // [images per chunk, Ci*k*k, Ph*Pw]
  Tensor weight_grads;  // [images per chunk, Co, Ci*k*k]: per-image dW, summed into weight.grad
  // f32 stand-ins (activation_storage.h) of bf16 activations: X and Y read,
  // and X or its gradient, Y or its gradient, written.
  Tensor x_f32;
  Tensor y_f32;
  Tensor x_out_f32;
  Tensor y_out_f32;
};

}  // namespace plexus::layers

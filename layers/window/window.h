#pragma once
#include <cstdint>
#include <vector>

#include "plexus/layer.h"
#include "plexus/layer_config.h"
#include "plexus/registry.h"

namespace plexus::layers {

// Where a windowed-attention layer's elements go: an image [N, C, H, W] cut
// into non-overlapping w x w windows (Swin, Liu et al. 2021), after a
// cyclic shift by -s in H and W (Swin's shifted windows, torch.roll(x,
// (-s, -s))), its channels cut into `heads` groups of D = C / heads. With
// nH = H / w and nW = W / w windows down and across, the windows tensor is
//   [N * nH * nW, heads, w*w, D],
// a batch of (w*w x D) matrices per head, as MatMul takes them, with
//   windows[(n*nH + a)*nW + b, g, i*w + j, d]
//     = x[n, g*D + d, (a*w + i + s) mod H, (b*w + j + s) mod W].
// Each element of x appears once in the windows tensor, so the two layers
// below are each other's exact inverse, and each one's backward is the
// other's forward applied to the output gradient.
struct WindowGeometry {
  std::int64_t batch, channels, height, width;                     // N, C, H, W of the image
  std::int64_t window, shift, heads;                               // w, s, heads
  std::int64_t head_channels() const { return channels / heads; }  // D
  std::int64_t windows_down() const { return height / window; }    // nH
  std::int64_t windows_across() const { return width / window; }   // nW
  Shape windows_shape() const {
    return {batch * windows_down() * windows_across(), heads, window * window, head_channels()};
  }
};

// WindowPartition: x [N, C, H, W] -> windows [N*nH*nW, heads, w*w, C/heads]
// (formula above). Params: "window" w (1 to 4096, required; H and W must be
// multiples of it), "shift" s (0 <= s < w, default 0), "heads" (1 to 65536,
// default 1; C must be a multiple of it).
class WindowPartition : public Layer {
 public:
  explicit WindowPartition(LayerConfig& config);
  std::vector<Shape> output_shapes(const std::vector<Shape>& inputs) const override;
  LayerTraits traits(Device device) const override {
    LayerTraits traits;
    traits.has_cuda = PLEXUS_WITH_CUDA;
    traits.cuda_graph_capturable = true;
    // On CUDA each tensor may be f32 or bf16 (a copy, exact between equal dtypes); the CPU kernels take f32 and f64.
    traits.stores_bf16 = device.is_cuda();
    return traits;
  }

 protected:
  void forward_cpu(Context& ctx, const ConstTensors& inputs, const MutableTensors& outputs) override;
  void backward_cpu(Context& ctx, const ConstTensors& inputs, const ConstTensors& outputs,
                    const ConstTensors& output_grads, const MutableTensors& input_grads) override;
#if PLEXUS_WITH_CUDA
  void forward_cuda(Context& ctx, const ConstTensors& inputs, const MutableTensors& outputs) override;
  void backward_cuda(Context& ctx, const ConstTensors& inputs, const ConstTensors& outputs,
                     const ConstTensors& output_grads, const MutableTensors& input_grads) override;
#endif

 private:
  WindowGeometry geometry(const Shape& image) const;
  std::int64_t window_;
  std::int64_t shift_;
  std::int64_t heads_;
};

// WindowReverse: windows [N*nH*nW, heads, w*w, D] -> x [N, heads*D, H, W],
// the inverse of WindowPartition with the same window and shift (heads is
// read from the windows' shape). Two inputs: the windows, and a reference
// [N, C, H, W] whose shape alone is read (usually the tensor that was
// partitioned), so that one spec serves every image size; the reference
// gets no gradient. Params: "window" w (1 to 4096, required), "shift" s
// (0 <= s < w, default 0).
class WindowReverse : public Layer {
 public:
  explicit WindowReverse(LayerConfig& config);
  std::vector<Shape> output_shapes(const std::vector<Shape>& inputs) const override;
  LayerTraits traits(Device device) const override {
    LayerTraits traits;
    traits.input_gradients = {InputGradient::kComputed};  // the reference gets no gradient
    traits.other_inputs_gradient = InputGradient::kNone;
    traits.has_cuda = PLEXUS_WITH_CUDA;
    traits.cuda_graph_capturable = true;
    // On CUDA each tensor may be f32 or bf16 (a copy, exact between equal dtypes); the CPU kernels take f32 and f64.
    traits.stores_bf16 = device.is_cuda();
    return traits;
  }

 protected:
  void forward_cpu(Context& ctx, const ConstTensors& inputs, const MutableTensors& outputs) override;
  void backward_cpu(Context& ctx, const ConstTensors& inputs, const ConstTensors& outputs,
                    const ConstTensors& output_grads, const MutableTensors& input_grads) override;
#if PLEXUS_WITH_CUDA
  void forward_cuda(Context& ctx, const ConstTensors& inputs, const MutableTensors& outputs) override;
  void backward_cuda(Context& ctx, const ConstTensors& inputs, const ConstTensors& outputs,
                     const ConstTensors& output_grads, const MutableTensors& input_grads) override;
#endif

 private:
  WindowGeometry geometry(const Shape& windows, const Shape& reference) const;
  std::int64_t window_;
  std::int64_t shift_;
};

// The copies both layers are made of, on `tensor`'s device: windows from an
// image and an image from windows (formula above). f32 or f64 tensors.
void gather_windows_cpu(const WindowGeometry& g, const Tensor& image, Tensor& windows);
void gather_image_cpu(const WindowGeometry& g, const Tensor& windows, Tensor& image);
#if PLEXUS_WITH_CUDA
void gather_windows_cuda(Context& ctx, const WindowGeometry& g, const Tensor& image, Tensor& windows);
void gather_image_cuda(Context& ctx, const WindowGeometry& g, const Tensor& windows, Tensor& image);
#endif

// WindowPartition and WindowReverse.
void register_window(Registry& registry);

}  // namespace plexus::layers

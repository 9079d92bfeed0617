// CUDA kernels of WindowPartition and WindowReverse (math in window.h). Both
// copies are transposes of each image row: x[n, :, h, :] is a C x W matrix
// (W contiguous) whose element (c, x) goes to a windows row of D contiguous
// channels. One block moves a 32 x 32 tile (32 channels, 32 columns of one
// row) through shared memory, so that reads and writes are both coalesced:
// along the columns on the image side, along the channels on the windows side.
// Each tensor f32 or bf16 (activation_elements.cuh), or all f64.
#include "activation_elements.cuh"
#include "plexus/cuda/cuda_check.h"
#include "plexus/cuda/cuda_context.h"
#include "window/window.h"

namespace plexus::layers {

namespace {

constexpr int kTile = 32;     // channels and columns per tile
constexpr int kTileRows = 8;  // threads per block: kTile x kTileRows, each moving kTile / kTileRows elements

struct Geometry {
  long long channels, height, width, window, shift, heads, depth, down, across;
};

Geometry device_geometry(const WindowGeometry& g) {
  return {g.channels, g.height,          g.width,          g.window,          g.shift,
          g.heads,    g.head_channels(), g.windows_down(), g.windows_across()};
}

// The flat index in the windows tensor of x[n, c, row, column], for
// a*w + i = (row - s) mod H (given as a and i) and b*w + j = (column - s) mod W:
//   windows[(n*nH + a)*nW + b, c / D, i*w + j, c % D].
__device__ long long window_index(const Geometry& g, long long n, long long a, long long i, long long column,
                                  long long c) {
  long long shifted_column = (column - g.shift + g.width) % g.width;
  long long b = shifted_column / g.window, j = shifted_column % g.window;
  long long window = ((n * g.down + a) * g.across + b) * g.heads + c / g.depth;
  return (window * g.window * g.window + i * g.window + j) * g.depth + c % g.depth;
}

// kToWindows: windows[...] = x[n, c, row, column] (WindowPartition forward,
// WindowReverse backward); else x[n, c, row, column] = windows[...] (the
// other two). Block (blockIdx.x, blockIdx.y): image row n*H + row, tile of
// columns blockIdx.x % tiles_across, tile of channels blockIdx.y.
template <typename Elements, bool kToWindows>
__global__ void window_transpose(Elements from, Elements to, Geometry g, long long tiles_across) {
  __shared__ typename Elements::Value tile[kTile][kTile + 1];  // [channel][column]; +1 avoids bank conflicts
  const long long image_row = blockIdx.x / tiles_across;
  const long long column0 = (blockIdx.x % tiles_across) * kTile, c0 = (long long)blockIdx.y * kTile;
  const long long n = image_row / g.height, row = image_row % g.height;
  const long long shifted_row = (row - g.shift + g.height) % g.height;
  const long long a = shifted_row / g.window, i = shifted_row % g.window;
  auto image_index = [&](long long c, long long column) {
    return ((n * g.channels + c) * g.height + row) * g.width + column;
  };
  // Load: threads along the columns on the image side, along the channels on the windows side.
  for (int k = threadIdx.y; k < kTile; k += kTileRows) {
    if (kToWindows) {
      long long c = c0 + k, column = column0 + threadIdx.x;
      if (c < g.channels && column < g.width) tile[k][threadIdx.x] = from.load(image_index(c, column));
    } else {
      long long c = c0 + threadIdx.x, column = column0 + k;
      if (c < g.channels && column < g.width) tile[threadIdx.x][k] = from.load(window_index(g, n, a, i, column, c));
    }
  }
  __syncthreads();
  for (int k = threadIdx.y; k < kTile; k += kTileRows) {
    if (kToWindows) {
      long long c = c0 + threadIdx.x, column = column0 + k;
      if (c < g.channels && column < g.width) to.store(window_index(g, n, a, i, column, c), tile[threadIdx.x][k]);
    } else {
      long long c = c0 + k, column = column0 + threadIdx.x;
      if (c < g.channels && column < g.width) to.store(image_index(c, column), tile[k][threadIdx.x]);
    }
  }
}

template <bool kToWindows>
void launch_window_transpose(Context& ctx, const WindowGeometry& g, const Tensor& from, Tensor& to) {
  if (to.numel() == 0) return;
  const long long tiles_across = (g.width + kTile - 1) / kTile;
  const dim3 blocks(static_cast<unsigned>(g.batch * g.height * tiles_across),
                    static_cast<unsigned>((g.channels + kTile - 1) / kTile));
  const dim3 threads(kTile, kTileRows);
  dispatch_activation_elements(from.dtype(), [&](auto kind) {
    using Elements = decltype(kind);
    window_transpose<Elements, kToWindows><<<blocks, threads, 0, cuda::stream(ctx)>>>(
        Elements::of(&from), Elements::of(&to), device_geometry(g), tiles_across);
    cuda::check_launch("window_transpose", __FILE__, __LINE__);
  });
}

}  // namespace

void gather_windows_cuda(Context& ctx, const WindowGeometry& g, const Tensor& image, Tensor& windows) {
  launch_window_transpose<true>(ctx, g, image, windows);
}

void gather_image_cuda(Context& ctx, const WindowGeometry& g, const Tensor& windows, Tensor& image) {
  launch_window_transpose<false>(ctx, g, windows, image);
}

void WindowPartition::forward_cuda(Context& ctx, const ConstTensors& inputs, const MutableTensors& outputs) {
  gather_windows_cuda(ctx, geometry(inputs[0]->shape()), *inputs[0], *outputs[0]);
}

void WindowPartition::backward_cuda(Context& ctx, const ConstTensors& inputs, const ConstTensors&,
                                    const ConstTensors& output_grads, const MutableTensors& input_grads) {
  if (input_grads[0]) gather_image_cuda(ctx, geometry(inputs[0]->shape()), *output_grads[0], *input_grads[0]);
}

void WindowReverse::forward_cuda(Context& ctx, const ConstTensors& inputs, const MutableTensors& outputs) {
  gather_image_cuda(ctx, geometry(inputs[0]->shape(), inputs[1]->shape()), *inputs[0], *outputs[0]);
}

void WindowReverse::backward_cuda(Context& ctx, const ConstTensors& inputs, const ConstTensors&,
                                  const ConstTensors& output_grads, const MutableTensors& input_grads) {
  if (input_grads[0])
    gather_windows_cuda(ctx, geometry(inputs[0]->shape(), inputs[1]->shape()), *output_grads[0], *input_grads[0]);
}

}  // namespace plexus::layers

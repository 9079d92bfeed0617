#pragma once
// The convolutions of the integer network's CPU backend and of the float
// network it is quantised from, in one form: im2col and an f64 GEMM
// (Eigen) per block of output positions, one thread a block, with the taps
// of integer_network.h. For the integer network every product and partial
// sum is an integer that f64 holds exactly (integer_network.h).
#include <Eigen/Core>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "integer_arithmetic.h"
#include "network_structure.h"
#include "plexus/cpu_parallel.h"

namespace plexus::codec {

using RowMatrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// weight_matrix (network_structure.h) as an Eigen matrix [O, C k k].
template <typename Conv>
RowMatrix weight_rows(const Conv& layer) {
  const std::vector<double> matrix = weight_matrix(layer);
  return Eigen::Map<const RowMatrix>(matrix.data(), layer.out_channels,
                                     static_cast<std::int64_t>(matrix.size()) / layer.out_channels);
}

// y[o, p] = bias[o] + sum_r weight[o, r] x[tap r of output position p], for
// an input of side `in` and an output of side `out` (Out: int64 for the
// integer network, whose products are exact integers, or double).
template <typename Out, typename Conv, typename In>
std::vector<Out> cpu_convolution(const Conv& layer, const RowMatrix& weight, const std::vector<In>& x, Side in,
                                 Side out) {
  const std::int64_t rows = weight.cols(), positions = out.first * out.second, k = layer.kernel;
  const std::int64_t block = cpu_block_positions(positions, rows);
  const arithmetic::ConvGeometry geometry{layer.transposed ? 1 : 0,
                                          layer.in_channels,
                                          layer.kernel,
                                          layer.stride,
                                          layer.padding,
                                          in.first,
                                          in.second,
                                          out.second};
  std::vector<Out> y(static_cast<std::size_t>(layer.out_channels * positions));
  parallel_for((positions + block - 1) / block, [&](std::int64_t b) {
    const std::int64_t first = b * block, count = std::min(block, positions - first);
    RowMatrix cols(rows, count);
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t p = 0; p < count; ++p) {
        const std::int64_t q = first + p;
        const std::int64_t source =
            arithmetic::tap_source(geometry, r / (k * k), r / k % k, r % k, q / out.second, q % out.second);
        cols(r, p) = source < 0 ? 0.0 : static_cast<double>(x[static_cast<std::size_t>(source)]);
      }
    const RowMatrix product = weight * cols;
    for (std::int64_t o = 0; o < layer.out_channels; ++o)
      for (std::int64_t p = 0; p < count; ++p)
        y[static_cast<std::size_t>(o * positions + first + p)] =
            layer.bias[static_cast<std::size_t>(o)] + static_cast<Out>(product(o, p));
  });
  return y;
}

}  // namespace plexus::codec

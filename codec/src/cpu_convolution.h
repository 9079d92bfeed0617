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

// y[o, where[p]] = bias[o] + sum_t weight[o, t] x[tap taps[t] of output
// position where[p]]: the columns of `weight` are the taps `taps` (rows
// r = (c k + i) k + j of the whole weight), an im2col and one GEMM per block
// of positions, one thread a block.
template <typename Out, typename Conv, typename In>
void convolve_positions(const Conv& layer, const arithmetic::ConvGeometry& geometry, const RowMatrix& weight,
                        const std::vector<std::int64_t>& taps, const std::vector<std::int64_t>& where,
                        const std::vector<In>& x, Side out, std::vector<Out>& y) {
  const std::int64_t k = layer.kernel, positions = out.first * out.second;
  const std::int64_t rows = static_cast<std::int64_t>(taps.size()), count = static_cast<std::int64_t>(where.size());
  if (count == 0) return;
  const std::int64_t block = cpu_block_positions(count, std::max<std::int64_t>(rows, 1));
  parallel_for((count + block - 1) / block, [&](std::int64_t b) {
    const std::int64_t first = b * block, size = std::min(block, count - first);
    RowMatrix cols(rows, size);
    for (std::int64_t t = 0; t < rows; ++t) {
      const std::int64_t r = taps[static_cast<std::size_t>(t)];
      for (std::int64_t p = 0; p < size; ++p) {
        const std::int64_t q = where[static_cast<std::size_t>(first + p)];
        const std::int64_t source =
            arithmetic::tap_source(geometry, r / (k * k), r / k % k, r % k, q / out.second, q % out.second);
        cols(t, p) = source < 0 ? 0.0 : static_cast<double>(x[static_cast<std::size_t>(source)]);
      }
    }
    const RowMatrix product = weight * cols;
    for (std::int64_t o = 0; o < layer.out_channels; ++o)
      for (std::int64_t p = 0; p < size; ++p)
        y[static_cast<std::size_t>(o * positions + where[static_cast<std::size_t>(first + p)])] =
            layer.bias[static_cast<std::size_t>(o)] + static_cast<Out>(product(o, p));
  });
}

// y[o, p] = bias[o] + sum_r weight[o, r] x[tap r of output position p], for
// an input of side `in` and an output of side `out` (Out: int64 for the
// integer network, whose products are exact integers, or double).
template <typename Out, typename Conv, typename In>
std::vector<Out> cpu_convolution(const Conv& layer, const RowMatrix& weight, const std::vector<In>& x, Side in,
                                 Side out) {
  const arithmetic::ConvGeometry geometry{layer.transposed ? 1 : 0,
                                          layer.in_channels,
                                          layer.kernel,
                                          layer.stride,
                                          layer.padding,
                                          in.first,
                                          in.second,
                                          out.second};
  std::vector<std::int64_t> taps(static_cast<std::size_t>(weight.cols())), where(out.first * out.second);
  for (std::size_t r = 0; r < taps.size(); ++r) taps[r] = static_cast<std::int64_t>(r);
  for (std::size_t q = 0; q < where.size(); ++q) where[q] = static_cast<std::int64_t>(q);
  std::vector<Out> y(where.size() * static_cast<std::size_t>(layer.out_channels));
  convolve_positions(layer, geometry, weight, taps, where, x, out, y);
  return y;
}

// cpu_convolution of a transposed layer with stride s > 1 for the integer
// network. Output position (y, x) reads only the taps i = y + p, j = x + p
// (mod s); the others fall in the stride gaps and read zeros. So the positions
// are computed in s^2 phases (y mod s, x mod s), each a product with its own
// taps' columns of the weight: about 1/s^2 of one product over all taps. The
// sums are the same integers, exact in f64 in any order (integer_network.h).
template <typename Conv, typename In>
std::vector<std::int64_t> cpu_transposed_convolution_by_phase(const Conv& layer, const RowMatrix& weight,
                                                              const std::vector<In>& x, Side in, Side out) {
  const std::int64_t k = layer.kernel, s = layer.stride, positions = out.first * out.second;
  const arithmetic::ConvGeometry geometry{1,        layer.in_channels, layer.kernel, layer.stride, layer.padding,
                                          in.first, in.second,         out.second};
  const auto congruent = [&](std::int64_t a, std::int64_t b) { return ((a - b) % s + s) % s == 0; };
  std::vector<std::int64_t> y(static_cast<std::size_t>(layer.out_channels * positions));
  for (std::int64_t phase_y = 0; phase_y < s; ++phase_y)
    for (std::int64_t phase_x = 0; phase_x < s; ++phase_x) {
      std::vector<std::int64_t> taps;  // the rows r = (c k + i) k + j of the weight this phase reads
      for (std::int64_t r = 0; r < weight.cols(); ++r)
        if (congruent(r / k % k, phase_y + layer.padding) && congruent(r % k, phase_x + layer.padding))
          taps.push_back(r);
      std::vector<std::int64_t> where;  // the phase's output positions
      for (std::int64_t row = phase_y; row < out.first; row += s)
        for (std::int64_t column = phase_x; column < out.second; column += s)
          where.push_back(row * out.second + column);
      RowMatrix phase_weight(layer.out_channels, static_cast<std::int64_t>(taps.size()));
      for (std::size_t t = 0; t < taps.size(); ++t)
        phase_weight.col(static_cast<std::int64_t>(t)) = weight.col(taps[t]);
      convolve_positions(layer, geometry, phase_weight, taps, where, x, out, y);
    }
  return y;
}

}  // namespace plexus::codec

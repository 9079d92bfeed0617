#include "ms_ssim/ms_ssim.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace plexus::layers {

std::array<double, kMsSsimWindow> ms_ssim_window() {
  std::array<double, kMsSsimWindow> g{};
  double sum = 0;
  for (int k = 0; k < kMsSsimWindow; ++k) {
    const double d = k - (kMsSsimWindow - 1) / 2.0;  // offset from the centre tap
    g[k] = std::exp(-d * d / (2 * kMsSsimSigma * kMsSsimSigma));
    sum += g[k];
  }
  for (double& v : g) v /= sum;
  return g;
}

std::array<std::int64_t, kMsSsimScales> ms_ssim_sides(std::int64_t side) {
  std::array<std::int64_t, kMsSsimScales> sides{};
  sides[0] = side;
  for (int s = 1; s < kMsSsimScales; ++s) sides[s] = (sides[s - 1] + 1) / 2;
  return sides;
}

namespace {

using Window = std::array<double, kMsSsimWindow>;
constexpr int kQuantities = 5;  // x, y, x x, y y, x y: filtered into mu_x, mu_y, E[xx], E[yy], E[xy]

// One channel of one image at one scale, row-major.
struct Plane {
  std::int64_t height = 0, width = 0;
  std::vector<double> x, y;
  std::int64_t filtered_height() const { return height - (kMsSsimWindow - 1); }
  std::int64_t filtered_width() const { return width - (kMsSsimWindow - 1); }
};

// avg_pool_2x2 with a zero pad of one on both ends of an odd side: output i
// covers rows 2i - p and 2i - p + 1 (p = side % 2), always divided by 4.
std::vector<double> pool(const std::vector<double>& in, std::int64_t h, std::int64_t w) {
  const std::int64_t oh = (h + 1) / 2, ow = (w + 1) / 2, ph = h % 2, pw = w % 2;
  std::vector<double> out(static_cast<std::size_t>(oh * ow), 0.0);
  for (std::int64_t i = 0; i < oh; ++i)
    for (std::int64_t j = 0; j < ow; ++j) {
      double sum = 0;
      for (std::int64_t r = 2 * i - ph; r < 2 * i - ph + 2; ++r)
        for (std::int64_t c = 2 * j - pw; c < 2 * j - pw + 2; ++c)
          if (r >= 0 && r < h && c >= 0 && c < w) sum += in[r * w + c];
      out[i * ow + j] = sum / 4;
    }
  return out;
}

// The transpose of pool: adds coarse(i, j) / 4 to every pixel of its window.
void unpool_add(const std::vector<double>& coarse, std::int64_t h, std::int64_t w, std::vector<double>& fine) {
  const std::int64_t ow = (w + 1) / 2, ph = h % 2, pw = w % 2;
  for (std::int64_t r = 0; r < h; ++r)
    for (std::int64_t c = 0; c < w; ++c) fine[r * w + c] += coarse[((r + ph) / 2) * ow + (c + pw) / 2] / 4;
}

// out = G * in without padding: [h, w] -> [h - 10, w - 10], rows then columns.
std::vector<double> filter(const std::vector<double>& in, std::int64_t h, std::int64_t w, const Window& g) {
  const std::int64_t oh = h - (kMsSsimWindow - 1), ow = w - (kMsSsimWindow - 1);
  std::vector<double> rows(static_cast<std::size_t>(h * ow)), out(static_cast<std::size_t>(oh * ow));
  for (std::int64_t r = 0; r < h; ++r)
    for (std::int64_t j = 0; j < ow; ++j) {
      double sum = 0;
      for (int k = 0; k < kMsSsimWindow; ++k) sum += g[k] * in[r * w + j + k];
      rows[r * ow + j] = sum;
    }
  for (std::int64_t i = 0; i < oh; ++i)
    for (std::int64_t j = 0; j < ow; ++j) {
      double sum = 0;
      for (int k = 0; k < kMsSsimWindow; ++k) sum += g[k] * rows[(i + k) * ow + j];
      out[i * ow + j] = sum;
    }
  return out;
}

// The transpose of filter: [h - 10, w - 10] -> [h, w].
std::vector<double> filter_transposed(const std::vector<double>& in, std::int64_t h, std::int64_t w, const Window& g) {
  const std::int64_t oh = h - (kMsSsimWindow - 1), ow = w - (kMsSsimWindow - 1);
  std::vector<double> rows(static_cast<std::size_t>(h * ow), 0.0), out(static_cast<std::size_t>(h * w), 0.0);
  for (std::int64_t i = 0; i < oh; ++i)
    for (int k = 0; k < kMsSsimWindow; ++k)
      for (std::int64_t j = 0; j < ow; ++j) rows[(i + k) * ow + j] += g[k] * in[i * ow + j];
  for (std::int64_t r = 0; r < h; ++r)
    for (std::int64_t j = 0; j < ow; ++j)
      for (int k = 0; k < kMsSsimWindow; ++k) out[r * w + j + k] += g[k] * rows[r * ow + j];
  return out;
}

// The five filtered maps of a plane: mu_x, mu_y, E[xx], E[yy], E[xy].
std::array<std::vector<double>, kQuantities> filtered_maps(const Plane& p, const Window& g) {
  std::vector<double> xx(p.x.size()), yy(p.x.size()), xy(p.x.size());
  for (std::size_t i = 0; i < p.x.size(); ++i) {
    xx[i] = p.x[i] * p.x[i];
    yy[i] = p.y[i] * p.y[i];
    xy[i] = p.x[i] * p.y[i];
  }
  return {filter(p.x, p.height, p.width, g), filter(p.y, p.height, p.width, g), filter(xx, p.height, p.width, g),
          filter(yy, p.height, p.width, g), filter(xy, p.height, p.width, g)};
}

// cs and l at one filtered position from mu_x (a), mu_y (b), E[xx], E[yy], E[xy].
struct Similarity {
  double cs, luminance, cs_denominator, luminance_denominator;
};
Similarity similarity_at(double a, double b, double exx, double eyy, double exy) {
  const double d = exx - a * a + eyy - b * b + kMsSsimC2;
  const double q = a * a + b * b + kMsSsimC1;
  return {(2 * (exy - a * b) + kMsSsimC2) / d, (2 * a * b + kMsSsimC1) / q, d, q};
}

// The scales of one channel of one image (x, y read from [H, W] at `x`, `y`).
template <typename T>
std::vector<Plane> pyramid(const T* x, const T* y, std::int64_t h, std::int64_t w) {
  std::vector<Plane> scales(kMsSsimScales);
  scales[0].height = h;
  scales[0].width = w;
  scales[0].x.assign(x, x + h * w);
  scales[0].y.assign(y, y + h * w);
  for (int s = 1; s < kMsSsimScales; ++s) {
    const Plane& fine = scales[s - 1];
    scales[s].height = (fine.height + 1) / 2;
    scales[s].width = (fine.width + 1) / 2;
    scales[s].x = pool(fine.x, fine.height, fine.width);
    scales[s].y = pool(fine.y, fine.height, fine.width);
  }
  return scales;
}

// factors[s] = CS_s for s < 4, factors[4] = S_4; M = prod relu(factors[s])^w_s.
struct PlaneValue {
  std::array<double, kMsSsimScales> factors{};
  double value = 0;
};

PlaneValue plane_value(const std::vector<Plane>& scales, const Window& g) {
  PlaneValue result;
  result.value = 1;
  for (int s = 0; s < kMsSsimScales; ++s) {
    const auto maps = filtered_maps(scales[s], g);
    double sum = 0;
    for (std::size_t i = 0; i < maps[0].size(); ++i) {
      const Similarity v = similarity_at(maps[0][i], maps[1][i], maps[2][i], maps[3][i], maps[4][i]);
      sum += s + 1 < kMsSsimScales ? v.cs : v.cs * v.luminance;
    }
    result.factors[s] = sum / static_cast<double>(maps[0].size());
    result.value *= std::pow(std::max(result.factors[s], 0.0), kMsSsimWeights[s]);
  }
  return result;
}

// dM/dx and dM/dy of one plane, scaled by `upstream`, into dx and dy ([H, W]).
void plane_gradients(const std::vector<Plane>& scales, const Window& g, double upstream, std::vector<double>& dx,
                     std::vector<double>& dy) {
  const PlaneValue v = plane_value(scales, g);
  std::vector<double> coarse_dx, coarse_dy;
  for (int s = kMsSsimScales - 1; s >= 0; --s) {
    const Plane& p = scales[s];
    // relu(f)^w has no gradient where f <= 0, and M is 0 there.
    const double factor = v.factors[s];
    const double dfactor = v.value > 0 && factor > 0 ? upstream * kMsSsimWeights[s] * v.value / factor : 0.0;
    const auto maps = filtered_maps(p, g);
    const std::size_t positions = maps[0].size();
    const double per_position = dfactor / static_cast<double>(positions);
    std::array<std::vector<double>, kQuantities> grads;
    for (auto& grad : grads) grad.assign(positions, 0.0);
    const bool last = s + 1 == kMsSsimScales;
    for (std::size_t i = 0; i < positions; ++i) {
      const double a = maps[0][i], b = maps[1][i];
      const Similarity sim = similarity_at(a, b, maps[2][i], maps[3][i], maps[4][i]);
      // d/d of the term averaged at this scale: cs, or l cs at the last scale.
      const double gcs = per_position * (last ? sim.luminance : 1.0);
      const double gl = last ? per_position * sim.cs : 0.0;
      const double inv_d = 1.0 / sim.cs_denominator, inv_q = 1.0 / sim.luminance_denominator;
      grads[0][i] = gcs * (2 * a * sim.cs - 2 * b) * inv_d + gl * (2 * b - 2 * a * sim.luminance) * inv_q;
      grads[1][i] = gcs * (2 * b * sim.cs - 2 * a) * inv_d + gl * (2 * a - 2 * b * sim.luminance) * inv_q;
      grads[2][i] = -gcs * sim.cs * inv_d;
      grads[3][i] = grads[2][i];
      grads[4][i] = gcs * 2 * inv_d;
    }
    std::array<std::vector<double>, kQuantities> full;
    for (int q = 0; q < kQuantities; ++q) full[q] = filter_transposed(grads[q], p.height, p.width, g);
    std::vector<double> sdx(p.x.size()), sdy(p.x.size());
    for (std::size_t i = 0; i < p.x.size(); ++i) {
      sdx[i] = full[0][i] + 2 * p.x[i] * full[2][i] + p.y[i] * full[4][i];
      sdy[i] = full[1][i] + 2 * p.y[i] * full[3][i] + p.x[i] * full[4][i];
    }
    if (!coarse_dx.empty()) {
      unpool_add(coarse_dx, p.height, p.width, sdx);
      unpool_add(coarse_dy, p.height, p.width, sdy);
    }
    coarse_dx = std::move(sdx);
    coarse_dy = std::move(sdy);
  }
  dx = std::move(coarse_dx);
  dy = std::move(coarse_dy);
}

}  // namespace

MSSSIM::MSSSIM(LayerConfig&) {}

std::vector<Shape> MSSSIM::output_shapes(const std::vector<Shape>& inputs) const {
  if (inputs.size() != 2)
    fail_shape("takes 2 inputs (x, y: images [N, C, H, W]), got " + std::to_string(inputs.size()));
  if (inputs[0] != inputs[1])
    fail_shape("input x " + shape_str(inputs[0]) + " and input y " + shape_str(inputs[1]) +
               " must have the same shape");
  const Shape& shape = inputs[0];
  if (shape.size() != 4) fail_shape("inputs must be images [N, C, H, W], got " + shape_str(shape));
  if (shape[0] < 1 || shape[1] < 1) fail_shape("inputs " + shape_str(shape) + " are empty");
  if (shape[2] < kMsSsimMinSide || shape[3] < kMsSsimMinSide)
    fail_shape("images " + shape_str(shape) + " are too small: both sides must be at least " +
               std::to_string(kMsSsimMinSide) + " pixels, so that the fifth of its 5 scales (each half the last) " +
               "still holds its 11x11 window");
  return {Shape{}};
}

void MSSSIM::forward_cpu(Context&, const ConstTensors& inputs, const MutableTensors& outputs) {
  const Window g = ms_ssim_window();
  dispatch_float(inputs[0]->dtype(), [&](auto zero) {
    using T = decltype(zero);
    const std::int64_t planes = inputs[0]->dim(0) * inputs[0]->dim(1), h = inputs[0]->dim(2), w = inputs[0]->dim(3);
    double sum = 0;
    for (std::int64_t p = 0; p < planes; ++p)
      sum += plane_value(pyramid(inputs[0]->data<T>() + p * h * w, inputs[1]->data<T>() + p * h * w, h, w), g).value;
    outputs[0]->data<T>()[0] = static_cast<T>(sum / static_cast<double>(planes));
  });
}

void MSSSIM::backward_cpu(Context&, const ConstTensors& inputs, const ConstTensors&, const ConstTensors& output_grads,
                          const MutableTensors& input_grads) {
  if (!input_grads[0] && !input_grads[1]) return;
  const Window g = ms_ssim_window();
  dispatch_float(inputs[0]->dtype(), [&](auto zero) {
    using T = decltype(zero);
    const std::int64_t planes = inputs[0]->dim(0) * inputs[0]->dim(1), h = inputs[0]->dim(2), w = inputs[0]->dim(3);
    const double upstream = static_cast<double>(output_grads[0]->data<T>()[0]) / static_cast<double>(planes);
    std::vector<double> dx, dy;
    for (std::int64_t p = 0; p < planes; ++p) {
      const std::int64_t offset = p * h * w;
      plane_gradients(pyramid(inputs[0]->data<T>() + offset, inputs[1]->data<T>() + offset, h, w), g, upstream, dx, dy);
      if (input_grads[0])
        std::transform(dx.begin(), dx.end(), input_grads[0]->data<T>() + offset,
                       [](double v) { return static_cast<T>(v); });
      if (input_grads[1])
        std::transform(dy.begin(), dy.end(), input_grads[1]->data<T>() + offset,
                       [](double v) { return static_cast<T>(v); });
    }
  });
}

void register_ms_ssim(Registry& registry) {
  registry.add(
      "MSSSIM", [](LayerConfig& config) { return std::make_unique<MSSSIM>(config); },
      "multi-scale SSIM of two images [N, C, H, W] in [0, 1] (5 scales, 11-tap Gaussian window of sigma 1.5; "
      "sides >= 161), the mean over images and channels, a scalar");
}

}  // namespace plexus::layers

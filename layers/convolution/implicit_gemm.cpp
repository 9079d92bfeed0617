// Which convolutions the tensor-core engine takes (implicit_gemm.h). Host
// logic only, so CPU-only builds link it too.
#include <limits>

#include "convolution/few_channel_conv.h"
#include "convolution/implicit_gemm.h"

namespace plexus::layers::implicit_gemm {

namespace {

using detail::ceil_div;
using detail::round_up;
bool fits_int(long long value) { return value >= 0 && value < std::numeric_limits<int>::max(); }

}  // namespace

bool supports(const Context& ctx, DType dtype, const ConvProblem& p) {
  if (!PLEXUS_WITH_CUDA || dtype != DType::f32 || !ctx.device().is_cuda() || !ctx.allow_tf32()) return false;
  if (p.stride < 1 || p.stride * p.stride > kMaxPhases || p.kernel < 1 || p.kernel > 64) return false;
  if (p.height > kMaxExtent || p.width > kMaxExtent || p.out_height > kMaxExtent || p.out_width > kMaxExtent)
    return false;
  // Tap tables: one entry per kernel tap (tap-major K), or per K index when
  // the source has few channels: forward K = Ci*k*k, backward_data K =
  // Co*ceil(k/s)^2 per phase.
  const long long taps_per_phase = ceil_div(p.kernel, p.stride);
  const long long forward_table = p.in_channels >= kTapMajorChannels
                                      ? p.kernel * p.kernel
                                      : round_up(p.in_channels * p.kernel * p.kernel, kTapAlign);
  const long long backward_table = p.out_channels >= kTapMajorChannels
                                       ? taps_per_phase * taps_per_phase
                                       : round_up(p.out_channels * taps_per_phase * taps_per_phase, kTapAlign);
  if (forward_table > kMaxTaps || backward_table > kMaxTaps) return false;
  // 32-bit offsets within one image, and pixel counts of a batch.
  return fits_int(p.in_channels * p.height * p.width) && fits_int(p.out_channels * p.out_height * p.out_width) &&
         fits_int(p.batch * p.out_height * p.out_width * 2) && fits_int(p.batch * p.height * p.width * 2);
}

bool takes_backward_data(const ConvProblem& p) {
  return p.in_channels > kMinGatherRows || few_channel_conv::takes_backward_data(p);
}

}  // namespace plexus::layers::implicit_gemm

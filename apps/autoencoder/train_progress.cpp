#include "train_progress.h"

#include <algorithm>
#include <cmath>

namespace plexus::ae {

void SmoothedStats::add(double step_loss, double step_mse, double step_bpp, double step_ms_ssim) {
  ++count;
  const double weight = 1.0 / static_cast<double>(std::min<std::int64_t>(count, kSpan));
  loss += weight * (step_loss - loss);
  mse += weight * (step_mse - mse);
  bpp += weight * (step_bpp - bpp);
  ms_ssim += weight * (step_ms_ssim - ms_ssim);
}

double psnr_of_mse(double mse) { return 10.0 * std::log10(1.0 / std::max(mse, 1e-12)); }

}  // namespace plexus::ae

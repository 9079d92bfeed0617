#include "train_progress.h"

#include <algorithm>
#include <cmath>

#include "run_metadata.h"

namespace plexus::ae {

nlohmann::json progress_json(const TrainProgress& p) {
  return {{"lr_schedule", p.lr_schedule},
          {"elapsed_seconds", p.elapsed_seconds},
          {"best_val_psnr", std::isfinite(p.best_val_psnr) ? nlohmann::json(p.best_val_psnr) : nlohmann::json(nullptr)}};
}

TrainProgress progress_from_checkpoint(const TensorFile& file) {
  TrainProgress progress;
  auto it = file.metadata.find(kTrainProgressKey);
  if (it == file.metadata.end()) return progress;
  auto saved = nlohmann::json::parse(it->second, nullptr, /*allow_exceptions=*/false);
  if (!saved.is_object()) return progress;
  if (saved.contains("lr_schedule")) progress.lr_schedule = saved.at("lr_schedule");
  if (saved.contains("elapsed_seconds") && saved.at("elapsed_seconds").is_number())
    progress.elapsed_seconds = saved.at("elapsed_seconds").get<double>();
  if (saved.contains("best_val_psnr") && saved.at("best_val_psnr").is_number())
    progress.best_val_psnr = saved.at("best_val_psnr").get<double>();
  return progress;
}

void SmoothedStats::add(double step_loss, double step_mse, double step_bpp) {
  ++count;
  const double weight = 1.0 / static_cast<double>(std::min<std::int64_t>(count, kSpan));
  loss += weight * (step_loss - loss);
  mse += weight * (step_mse - mse);
  bpp += weight * (step_bpp - bpp);
}

double psnr_of_mse(double mse) { return 10.0 * std::log10(1.0 / std::max(mse, 1e-12)); }

double remaining_seconds(double seconds_per_step, std::int64_t steps_left, double time_limit, double seconds_so_far) {
  double eta = seconds_per_step * static_cast<double>(std::max<std::int64_t>(steps_left, 0));
  if (time_limit > 0) eta = std::min(eta, std::max(0.0, time_limit - seconds_so_far));
  return eta;
}

}  // namespace plexus::ae

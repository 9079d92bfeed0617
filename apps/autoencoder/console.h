#pragma once
// Terminal output of plexus-ae. Messages and warnings (spdlog) go to stderr;
// while a progress bar owns the last line of a terminal, a message first
// erases it and the bar is redrawn on its next update. Results (tables) go
// to stdout.
#include <chrono>
#include <cstdint>
#include <string>

namespace plexus::ae {

// Routes spdlog's default logger to stderr ("warning: ...").
void configure_logging();
bool stderr_is_terminal();

struct StepStats {
  std::int64_t step = 0;               // steps completed
  std::int64_t total = 0;              // --steps
  double loss = 0, bpp = 0, psnr = 0;  // smoothed ("avg"): see SmoothedStats in train_progress.h
  double images_per_second = 0;
  double eta_seconds = 0;
};

// "1h02m", "4m05s", "12s".
std::string format_duration(double seconds);

// The one-line progress display: redrawn in place (at most ~8 times a
// second) on a terminal; a plain line every `plain_every` steps otherwise.
class ProgressBar {
 public:
  ProgressBar(bool interactive, std::int64_t plain_every);
  void update(const StepStats& stats);
  // Ends the bar's line so later output starts on a fresh one.
  void finish();

 private:
  std::string render(const StepStats& stats, int width) const;
  bool interactive_;
  std::int64_t plain_every_;
  std::chrono::steady_clock::time_point last_draw_{};
  bool drawn_ = false;
};

}  // namespace plexus::ae

#pragma once
// Terminal output of plexus-ae. Messages and warnings (spdlog) go to stderr;
// while a progress bar owns the last line of a terminal, a message first
// erases it and the bar is redrawn on its next update. Results (tables) go
// to stdout.
#include <chrono>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace plexus::data {
class ImageFolder;
}

namespace plexus::ae {

// The warning, at the end of a command, that lists the images of a folder
// skipped as unreadable (each was also named when it was skipped):
// "N <role> image(s) in '<folder>' were skipped as unreadable:" and the
// paths, one a line; nothing when none was skipped. `role` ("training",
// "validation") may be empty.
void warn_skipped_images(const data::ImageFolder& images, const std::string& role = "");

// Routes spdlog's default logger to stderr ("warning: ...").
void configure_logging();
bool stderr_is_terminal();

struct StepStats {
  std::int64_t step = 0;               // steps completed
  std::int64_t total = 0;              // --steps
  double loss = 0, bpp = 0, psnr = 0;  // smoothed ("avg"): see SmoothedStats in train_progress.h
  double ms_ssim = std::nan("");       // smoothed too; NaN (not shown) when the loss does not measure it
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

// The progress line of a batch of files: "[3/24] photo.png  1m02s, ETA 4m05s".
// The ETA divides the time so far by the share of the inputs' bytes done
// (files differ in size); none before the first file is done.
std::string file_progress_line(std::size_t index, std::size_t count, const std::string& name, double elapsed_seconds,
                               double bytes_done, double bytes_total);

// compress's and decompress's progress on a terminal: before each file, its
// progress line on stderr's last line; erased again before the file's result
// or any message is printed. Prints nothing when stderr is not a terminal.
class FileProgress {
 public:
  // `inputs`: the batch's files, whose sizes weigh the ETA.
  FileProgress(bool interactive, const std::vector<std::string>& inputs);
  void start(std::size_t index);  // before inputs[index] is read
  // Within inputs[index]: `fraction` (0..1) of its work done (the codec's bands), counted in the ETA.
  void within(std::size_t index, double fraction);
  void erase();                  // before printing its result line
  void done(std::size_t index);  // after it, processed or failed

 private:
  bool interactive_;
  std::vector<std::string> inputs_;
  std::vector<double> bytes_;
  double bytes_total_ = 0, bytes_done_ = 0;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

}  // namespace plexus::ae

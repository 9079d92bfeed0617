#include "console.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <mutex>

#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>

#include "plexus/data/image_folder.h"

namespace plexus::ae {

namespace {
// Whether the progress bar currently holds an unfinished terminal line.
bool bar_line_open = false;
std::mutex terminal_mutex;

// An spdlog sink writing "level: message" to stderr, erasing an open bar
// line first.
class StderrSink : public spdlog::sinks::base_sink<std::mutex> {
 protected:
  void sink_it_(const spdlog::details::log_msg& message) override {
    std::lock_guard<std::mutex> lock(terminal_mutex);
    if (bar_line_open) {
      std::fputs("\r\033[K", stderr);
      bar_line_open = false;
    }
    const auto level = spdlog::level::to_string_view(message.level);
    std::fprintf(stderr, "%.*s: %.*s\n", static_cast<int>(level.size()), level.data(),
                 static_cast<int>(message.payload.size()), message.payload.data());
    std::fflush(stderr);
  }
  void flush_() override { std::fflush(stderr); }
};

int terminal_width() {
  winsize size{};
  if (ioctl(STDERR_FILENO, TIOCGWINSZ, &size) == 0 && size.ws_col > 20) return size.ws_col;
  return 100;
}
}  // namespace

void configure_logging() {
  auto logger = std::make_shared<spdlog::logger>("plexus-ae", std::make_shared<StderrSink>());
  spdlog::set_default_logger(logger);
}

void warn_skipped_images(const data::ImageFolder& images, const std::string& role) {
  const auto skipped = images.skipped();
  if (skipped.empty()) return;
  std::string list;
  for (const auto& path : skipped) list += "\n  " + path;
  spdlog::warn("{} {}image(s) in '{}' were skipped as unreadable:{}", skipped.size(), role.empty() ? "" : role + " ",
               images.folder(), list);
}

bool stderr_is_terminal() { return isatty(STDERR_FILENO) == 1; }

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const auto total = static_cast<long long>(std::llround(seconds));
  char text[32];
  if (total >= 3600) std::snprintf(text, sizeof text, "%lldh%02lldm", total / 3600, (total % 3600) / 60);
  else if (total >= 60) std::snprintf(text, sizeof text, "%lldm%02llds", total / 60, total % 60);
  else std::snprintf(text, sizeof text, "%llds", total);
  return text;
}

ProgressBar::ProgressBar(bool interactive, std::int64_t plain_every)
    : interactive_(interactive), plain_every_(std::max<std::int64_t>(1, plain_every)) {}

namespace {
std::string render_numbers(const StepStats& s) {
  char numbers[256], ms_ssim[32] = "";
  const int digits = static_cast<int>(std::to_string(s.total).size());
  if (!std::isnan(s.ms_ssim)) std::snprintf(ms_ssim, sizeof ms_ssim, "  MS-SSIM %.4f", s.ms_ssim);
  std::snprintf(numbers, sizeof numbers, " %*lld/%lld  avg loss %.4f  bpp %.3f  PSNR %.2f dB%s  %.1f img/s  ETA %s",
                digits, static_cast<long long>(s.step), static_cast<long long>(s.total), s.loss, s.bpp, s.psnr, ms_ssim,
                s.images_per_second, format_duration(s.eta_seconds).c_str());
  return numbers;
}
}  // namespace

std::string ProgressBar::render(const StepStats& s, int width) const {
  std::string text = render_numbers(s);
  const int bar_width = std::min(30, width - static_cast<int>(text.size()) - 3);
  if (bar_width >= 5 && s.total > 0) {
    const int filled = static_cast<int>(bar_width * std::min(1.0, static_cast<double>(s.step) / s.total));
    text = "[" + std::string(filled, '#') + std::string(bar_width - filled, '.') + "]" + text;
  }
  if (static_cast<int>(text.size()) >= width) text.resize(width - 1);
  return text;
}

void ProgressBar::update(const StepStats& stats) {
  const bool last = stats.step >= stats.total;
  if (!interactive_) {
    if (stats.step % plain_every_ != 0 && !last) return;
    std::lock_guard<std::mutex> lock(terminal_mutex);
    std::fprintf(stderr, "step%s\n", render_numbers(stats).c_str());
    std::fflush(stderr);
    return;
  }
  const auto now = std::chrono::steady_clock::now();
  if (drawn_ && !last && now - last_draw_ < std::chrono::milliseconds(125)) return;
  last_draw_ = now;
  drawn_ = true;
  std::lock_guard<std::mutex> lock(terminal_mutex);
  std::fprintf(stderr, "\r\033[K%s", render(stats, terminal_width()).c_str());
  std::fflush(stderr);
  bar_line_open = true;
}

std::string file_progress_line(std::size_t index, std::size_t count, const std::string& name, double elapsed_seconds,
                               double bytes_done, double bytes_total) {
  std::string line = "[" + std::to_string(index + 1) + "/" + std::to_string(count) + "] " + name + "  " +
                     format_duration(elapsed_seconds);
  if (bytes_done > 0 && bytes_total > bytes_done)
    line += ", ETA " + format_duration(elapsed_seconds * (bytes_total - bytes_done) / bytes_done);
  return line;
}

FileProgress::FileProgress(bool interactive, const std::vector<std::string>& inputs)
    : interactive_(interactive), inputs_(inputs) {
  for (const std::string& input : inputs) {
    std::error_code error;
    const auto size = std::filesystem::file_size(input, error);
    bytes_.push_back(error ? 0.0 : static_cast<double>(size));
    bytes_total_ += bytes_.back();
  }
}

void FileProgress::start(std::size_t index) { within(index, 0); }

void FileProgress::within(std::size_t index, double fraction) {
  if (!interactive_) return;
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  std::string line = file_progress_line(index, inputs_.size(), inputs_[index], elapsed,
                                        bytes_done_ + fraction * bytes_[index], bytes_total_);
  if (fraction > 0) line += "  (" + std::to_string(static_cast<int>(100 * fraction)) + "% of this file)";
  const int width = terminal_width();
  if (static_cast<int>(line.size()) >= width) line.resize(width - 1);
  std::lock_guard<std::mutex> lock(terminal_mutex);
  std::fprintf(stderr, "\r\033[K%s", line.c_str());
  std::fflush(stderr);
  bar_line_open = true;
}

void FileProgress::erase() {
  std::lock_guard<std::mutex> lock(terminal_mutex);
  if (!bar_line_open) return;
  std::fputs("\r\033[K", stderr);
  std::fflush(stderr);
  bar_line_open = false;
}

void FileProgress::done(std::size_t index) {
  erase();
  bytes_done_ += bytes_[index];
}

void ProgressBar::finish() {
  std::lock_guard<std::mutex> lock(terminal_mutex);
  if (bar_line_open) {
    std::fputs("\n", stderr);
    std::fflush(stderr);
    bar_line_open = false;
  }
}

}  // namespace plexus::ae

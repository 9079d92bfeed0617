#pragma once
// Helpers for the data-pipeline tests: a scratch folder that removes itself,
// synthetic images whose pixels say where they came from, and a capture of
// spdlog's warnings.
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include "plexus/data/image.h"

namespace plexus::testing {

class ScratchFolder {
 public:
  explicit ScratchFolder(const std::string& tag) {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            ("plexus-" + tag + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScratchFolder() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  std::string path() const { return path_.string(); }
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

// R = x, G = y, B = (x + 2y) mod 256: every pixel names its own position.
inline data::Image position_image(int width, int height) {
  data::Image image(width, height);
  for (int y = 0; y < height; ++y)
    for (int x = 0; x < width; ++x) {
      image.at(y, x, 0) = static_cast<std::uint8_t>(x);
      image.at(y, x, 1) = static_cast<std::uint8_t>(y);
      image.at(y, x, 2) = static_cast<std::uint8_t>((x + 2 * y) % 256);
    }
  return image;
}

// data::write_png, creating the parent folders first.
inline void save_png(const std::string& path, const data::Image& image) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  data::write_png(path, image);
}

// An ICC profile of `colour_space` ("RGB " or "GRAY", 4 characters) as
// libpng checks one (ICC.1:2010 section 7.2): a 128-byte header (its size,
// class "mntr", the space, PCS "XYZ ", "acsp", the D50 illuminant), then a
// tag table of one private tag "plxs" holding `payload_bytes` bytes that
// depend on `seed`, so that a test sees whether every byte survived.
inline std::vector<std::uint8_t> icc_profile(const char* colour_space, std::size_t payload_bytes, unsigned seed) {
  const std::size_t size = 128 + 4 + 12 + payload_bytes;
  std::vector<std::uint8_t> p(size, 0);
  auto put32 = [&](std::size_t at, std::uint32_t v) {
    for (int i = 0; i < 4; ++i) p[at + i] = static_cast<std::uint8_t>(v >> (24 - 8 * i));
  };
  auto put4 = [&](std::size_t at, const char* text) { std::memcpy(&p[at], text, 4); };
  put32(0, static_cast<std::uint32_t>(size));
  p[8] = 2, p[9] = 0x10;  // version 2.1
  put4(12, "mntr");
  put4(16, colour_space);
  put4(20, "XYZ ");
  put4(36, "acsp");
  put32(68, 0x0000F6D6), put32(72, 0x00010000), put32(76, 0x0000D32D);  // D50 in s15Fixed16
  put32(128, 1);                                                        // one tag
  put4(132, "plxs"), put32(136, 144), put32(140, static_cast<std::uint32_t>(payload_bytes));
  for (std::size_t i = 0; i < payload_bytes; ++i) p[144 + i] = static_cast<std::uint8_t>((i * 131 + seed * 7) >> 1);
  return p;
}

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << bytes;
}

inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// Routes spdlog's default logger into a string while alive.
class LogCapture {
 public:
  LogCapture() : previous_(spdlog::default_logger()) {
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(stream_);
    spdlog::set_default_logger(std::make_shared<spdlog::logger>("capture", sink));
  }
  ~LogCapture() { spdlog::set_default_logger(previous_); }
  std::string text() const { return stream_.str(); }

 private:
  std::shared_ptr<spdlog::logger> previous_;
  std::ostringstream stream_;
};

}  // namespace plexus::testing

#pragma once
// `plexus-ae info FILE.pxae...`: what a compressed file holds, read without
// its model: image size, bytes and bits per pixel, format version and model
// kind, the fingerprint of the model that wrote it, and its rate level.
#include <cstdint>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace plexus::ae {

// A file larger than this is refused unread: a file of the largest image
// (2^26 pixels) at 24 bits per pixel stays well below it.
inline constexpr std::uint64_t kMaxInfoFileBytes = std::uint64_t{1} << 30;

// One line for a compressed file's bytes, e.g. "768x512 RGB, 23456 bytes,
// 0.4772 bpp; format version 3 (mean-scale-hyperprior), model fingerprint
// 0123456789abcdef, rate level 2.5". IoError saying what is wrong with them.
std::string describe_compressed_file(const std::vector<std::uint8_t>& bytes);

// Declares the subcommand on `app`; once parsed, it prints a line per file
// and leaves its exit code in `exit_code` (1 when a file could not be read).
void add_info_command(CLI::App& app, int& exit_code);

}  // namespace plexus::ae

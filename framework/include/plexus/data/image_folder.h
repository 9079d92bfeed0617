#pragma once
// ImageFolder: every PNG and JPEG under a folder (searched recursively;
// extensions .png, .jpg, .jpeg in any letter case), in sorted path order.
// Links to folders are followed, but each real folder is searched once, so
// a link loop neither hangs nor lists an image twice; a sub-folder that
// cannot be listed is warned about.
//
// Files whose header cannot be read are skipped when the folder is opened;
// so are images larger than the pixel limit (checked from the header);
// files that fail later, while decoding the pixels (e.g. truncated data),
// are skipped when first loaded. Either way spdlog warns once naming the
// file, and skipped() lists it so a caller can report the total at the end.
// An image converted to 8-bit RGB as it is decoded (16-bit, grey, alpha,
// CMYK: see ImageConversions) is warned about once, naming the file and
// the conversions, however often it is decoded again.
// Decoded images are kept in memory (8-bit) up to a byte budget, so an
// epoch after the first costs no decoding; the budget bounds memory on large
// folders. All methods are safe to call from several threads at once.
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "plexus/data/image.h"

namespace plexus::data {

class ImageFolder {
 public:
  static constexpr std::size_t kDefaultCacheBytes = std::size_t{2} << 30;  // 2 GiB

  // Throws IoError naming the folder when it is missing, not a folder, or
  // holds no readable PNG/JPEG. Images of more than `max_pixels` pixels are
  // skipped with a warning saying so, followed by `limit_hint` (how to
  // raise the limit, e.g. the command-line option) when given.
  explicit ImageFolder(const std::string& folder, std::size_t cache_bytes = kDefaultCacheBytes,
                       std::int64_t max_pixels = kDefaultMaxImagePixels, const std::string& limit_hint = "");

  const std::string& folder() const { return folder_; }
  // Files whose header was readable when the folder was opened.
  std::size_t size() const { return entries_.size(); }
  const std::string& path(std::size_t index) const { return entries_.at(index).path; }
  // The path relative to the folder, for tables and output names.
  std::string relative_path(std::size_t index) const;
  ImageSize size_of(std::size_t index) const { return entries_.at(index).size; }

  // Image `index`, decoded (or from the cache); nullptr when it cannot be
  // decoded, after warning once and recording it in skipped().
  std::shared_ptr<const Image> load(std::size_t index);
  // Image `index` or, when that one cannot be decoded, the first decodable
  // image after it (wrapping around), so a sampler's choice stays a pure
  // function of its seed and of which files are broken. Sets `used_index`.
  // Throws IoError naming the folder when no image decodes at all.
  std::shared_ptr<const Image> load_usable(std::size_t index, std::size_t* used_index = nullptr);

  // Every file skipped so far (unreadable header or undecodable pixels).
  std::vector<std::string> skipped() const;
  std::size_t skipped_count() const;

 private:
  struct Entry {
    std::string path;
    ImageSize size;
  };
  void skip(const std::string& path, const std::string& reason);
  std::string folder_;
  std::vector<Entry> entries_;
  std::size_t cache_bytes_;
  std::int64_t max_pixels_;
  mutable std::mutex mutex_;
  std::map<std::size_t, std::shared_ptr<const Image>> cache_;
  std::size_t cached_bytes_ = 0;
  std::set<std::size_t> undecodable_;
  std::set<std::size_t> converted_;  // warned about their conversions
  std::vector<std::string> skipped_;
};

}  // namespace plexus::data

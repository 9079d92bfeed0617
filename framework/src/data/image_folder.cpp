#include "plexus/data/image_folder.h"

#include <algorithm>
#include <cctype>
#include <filesystem>

#include <spdlog/spdlog.h>

#include "plexus/error.h"

namespace plexus::data {

namespace fs = std::filesystem;

namespace {
bool has_image_extension(const fs::path& path) {
  std::string extension = path.extension().string();
  std::transform(extension.begin(), extension.end(), extension.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return extension == ".png" || extension == ".jpg" || extension == ".jpeg";
}
}  // namespace

ImageFolder::ImageFolder(const std::string& folder, std::size_t cache_bytes)
    : folder_(folder), cache_bytes_(cache_bytes) {
  std::error_code error;
  if (!fs::exists(folder, error)) throw IoError("image folder '" + folder + "' does not exist");
  if (!fs::is_directory(folder, error)) throw IoError("'" + folder + "' is not a folder (expected a folder of PNG/JPEG images)");

  std::vector<std::string> candidates;
  auto options = fs::directory_options::follow_directory_symlink | fs::directory_options::skip_permission_denied;
  fs::recursive_directory_iterator it(folder, options, error), end;
  if (error) throw IoError("cannot list image folder '" + folder + "': " + error.message());
  for (; it != end; it.increment(error)) {
    if (error) throw IoError("cannot list image folder '" + folder + "': " + error.message());
    std::error_code type_error;
    if (it->is_regular_file(type_error) && has_image_extension(it->path())) candidates.push_back(it->path().string());
  }
  std::sort(candidates.begin(), candidates.end());
  if (candidates.empty())
    throw IoError("image folder '" + folder + "' holds no PNG or JPEG images (searched recursively for .png, .jpg, .jpeg)");

  for (const auto& path : candidates) {
    ImageSize size;
    std::string reason;
    if (read_image_size(path, size, reason)) entries_.push_back({path, size});
    else skip(path, reason);
  }
  if (entries_.empty())
    throw IoError("image folder '" + folder + "' holds no usable images: all " + std::to_string(candidates.size()) +
                  " PNG/JPEG file(s) were unreadable (see the warnings above)");
}

std::string ImageFolder::relative_path(std::size_t index) const {
  std::error_code error;
  fs::path relative = fs::relative(path(index), folder_, error);
  return error || relative.empty() ? path(index) : relative.string();
}

void ImageFolder::skip(const std::string& path, const std::string& reason) {
  spdlog::warn("skipping image '{}': {}", path, reason);
  std::lock_guard<std::mutex> lock(mutex_);
  skipped_.push_back(path);
}

std::shared_ptr<const Image> ImageFolder::load(std::size_t index) {
  const Entry& entry = entries_.at(index);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (undecodable_.count(index)) return nullptr;
    auto cached = cache_.find(index);
    if (cached != cache_.end()) return cached->second;
  }
  // Decoded outside the lock so threads decode in parallel; two threads may
  // decode the same file once each, which is harmless.
  auto decoded = std::make_shared<Image>();
  std::string reason;
  if (!try_read_image(entry.path, *decoded, reason)) {
    bool first = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      first = undecodable_.insert(index).second;
    }
    if (first) skip(entry.path, reason);
    return nullptr;
  }
  std::shared_ptr<const Image> image = std::move(decoded);
  std::lock_guard<std::mutex> lock(mutex_);
  if (!cache_.count(index) && cached_bytes_ + image->bytes() <= cache_bytes_) {
    cache_[index] = image;
    cached_bytes_ += image->bytes();
  }
  return image;
}

std::shared_ptr<const Image> ImageFolder::load_usable(std::size_t index, std::size_t* used_index) {
  for (std::size_t tried = 0; tried < entries_.size(); ++tried) {
    const std::size_t candidate = (index + tried) % entries_.size();
    if (auto image = load(candidate)) {
      if (used_index) *used_index = candidate;
      return image;
    }
  }
  throw IoError("image folder '" + folder_ + "' holds no usable images: none of its " +
                std::to_string(entries_.size()) + " PNG/JPEG file(s) could be decoded (see the warnings above)");
}

std::vector<std::string> ImageFolder::skipped() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return skipped_;
}

std::size_t ImageFolder::skipped_count() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return skipped_.size();
}

}  // namespace plexus::data

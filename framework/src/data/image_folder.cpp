#include "plexus/data/image_folder.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <set>
#include <utility>
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

namespace {

// Every image file under `folder`, following symbolic links to folders but
// entering each real folder once (a link back up would loop forever, and
// two links to one folder would list its images twice). A sub-folder that
// cannot be listed is warned about by name, not skipped silently.
class FolderWalk {
 public:
  explicit FolderWalk(const std::string& folder) : root_(folder) {}

  std::vector<std::string> images() {
    std::vector<std::string> found;
    visit(root_, found, /*is_root=*/true);
    std::sort(found.begin(), found.end());
    return found;
  }

 private:
  void visit(const fs::path& folder, std::vector<std::string>& found, bool is_root) {
    struct stat info {};
    if (::stat(folder.c_str(), &info) != 0) {
      warn_unlisted(folder, std::strerror(errno), is_root);
      return;
    }
    if (!entered_.insert({info.st_dev, info.st_ino}).second) {
      spdlog::warn("not entering '{}' again: it is a link to a folder already searched", folder.string());
      return;
    }
    std::error_code error;
    fs::directory_iterator it(folder, error), end;
    if (error) {
      warn_unlisted(folder, error.message(), is_root);
      return;
    }
    std::vector<fs::path> subfolders;
    for (; it != end; it.increment(error)) {
      std::error_code type_error;
      const fs::file_status status = it->status(type_error);  // follows links
      if (fs::is_directory(status)) subfolders.push_back(it->path());
      else if (fs::is_regular_file(status) && has_image_extension(it->path())) found.push_back(it->path().string());
      // A link loop, or an image name linking to nowhere (a dangling link of
      // another name is not worth a warning).
      else if (type_error && (has_image_extension(it->path()) || type_error != std::errc::no_such_file_or_directory))
        spdlog::warn("skipping '{}': cannot tell what it is: {}", it->path().string(), type_error.message());
    }
    if (error) warn_unlisted(folder, error.message(), is_root);
    for (const auto& subfolder : subfolders) visit(subfolder, found, false);
  }

  void warn_unlisted(const fs::path& folder, const std::string& reason, bool is_root) {
    if (is_root) throw IoError("cannot list image folder '" + folder.string() + "': " + reason);
    spdlog::warn("skipping folder '{}' (under '{}'): cannot list it: {}", folder.string(), root_.string(), reason);
  }

  fs::path root_;
  std::set<std::pair<dev_t, ino_t>> entered_;
};

}  // namespace

ImageFolder::ImageFolder(const std::string& folder, std::size_t cache_bytes, std::int64_t max_pixels,
                         const std::string& limit_hint)
    : folder_(folder), cache_bytes_(cache_bytes), max_pixels_(max_pixels) {
  std::error_code error;
  if (!fs::exists(folder, error)) throw IoError("image folder '" + folder + "' does not exist");
  if (!fs::is_directory(folder, error))
    throw IoError("'" + folder + "' is not a folder (expected a folder of PNG/JPEG images)");
  if (max_pixels < 1) throw ConfigError("the image pixel limit must be >= 1, got " + std::to_string(max_pixels));

  const std::vector<std::string> candidates = FolderWalk(folder).images();
  if (candidates.empty())
    throw IoError("image folder '" + folder +
                  "' holds no PNG or JPEG images (searched recursively for .png, .jpg, .jpeg)");

  for (const auto& path : candidates) {
    ImageSize size;
    std::string reason;
    // The header alone costs no memory whatever size it claims; the limit is
    // checked here to add the hint on how to raise it.
    if (!read_image_size(path, size, reason, std::numeric_limits<std::int64_t>::max())) {
      skip(path, reason);
      continue;
    }
    const std::string too_large = pixel_limit_problem(size.width, size.height, max_pixels_);
    if (!too_large.empty()) skip(path, too_large + (limit_hint.empty() ? "" : " (" + limit_hint + ")"));
    else entries_.push_back({path, size});
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
  ImageConversions conversions;
  if (!try_read_image(entry.path, *decoded, reason, max_pixels_, &conversions)) {
    bool first = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      first = undecodable_.insert(index).second;
    }
    if (first) skip(entry.path, reason);
    return nullptr;
  }
  if (conversions.any()) {
    bool first = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      first = converted_.insert(index).second;
    }
    if (first) warn_about_conversions(entry.path, conversions);
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

#include "skipped_images.h"

#include <spdlog/spdlog.h>

namespace plexus::ae {

void warn_skipped_images(const data::ImageFolder& images, const std::string& role) {
  const auto skipped = images.skipped();
  if (skipped.empty()) return;
  std::string list;
  for (const auto& path : skipped) list += "\n  " + path;
  spdlog::warn("{} {}image(s) in '{}' were skipped as unreadable:{}", skipped.size(), role.empty() ? "" : role + " ",
               images.folder(), list);
}

}  // namespace plexus::ae

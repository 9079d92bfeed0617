#pragma once
// The warning, at the end of a command, that lists the images of a folder
// skipped as unreadable (each was also named when it was skipped).
#include <string>

#include "plexus/data/image_folder.h"

namespace plexus::ae {

// "N <role> image(s) in '<folder>' were skipped as unreadable:" and the
// paths, one a line; nothing when none was skipped. `role` ("training",
// "validation") may be empty.
void warn_skipped_images(const data::ImageFolder& images, const std::string& role = "");

}  // namespace plexus::ae

#pragma once
// Where this plexus-ae runs from, and where an installed one finds what is
// installed with it (the bundled specs, the trained models).
#include <filesystem>
#include <optional>
#include <system_error>

namespace plexus::ae {

// This process's executable: the target of /proc/self/exe. `error` is set
// when it cannot be read.
std::filesystem::path executable_path(std::error_code& error);

// <prefix>/share/plexus/autoencoder for an executable <prefix>/bin/plexus-ae,
// whether or not it exists; nullopt when the executable's path cannot be read.
std::optional<std::filesystem::path> installed_data_folder();

}  // namespace plexus::ae

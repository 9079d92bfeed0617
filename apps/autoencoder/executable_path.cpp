#include "executable_path.h"

namespace plexus::ae {

namespace fs = std::filesystem;

fs::path executable_path(std::error_code& error) { return fs::read_symlink("/proc/self/exe", error); }

std::optional<fs::path> installed_data_folder() {
  std::error_code error;
  const fs::path executable = executable_path(error);
  if (error) return std::nullopt;
  return executable.parent_path().parent_path() / "share/plexus/autoencoder";
}

}  // namespace plexus::ae

#include "model_catalog.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include "plexus/error.h"
#include "plexus/registry.h"

namespace plexus::ae {

namespace fs = std::filesystem;

fs::path executable_path(std::error_code& error) { return fs::read_symlink("/proc/self/exe", error); }

std::optional<fs::path> installed_data_folder() {
  std::error_code error;
  const fs::path executable = executable_path(error);
  if (error) return std::nullopt;
  return executable.parent_path().parent_path() / "share/plexus/autoencoder";
}

namespace {
std::vector<std::string> candidate_folders() {
  std::vector<std::string> folders;
  if (const char* env = std::getenv("PLEXUS_AE_MODELS")) folders.push_back(env);
  if (const auto installed = installed_data_folder()) folders.push_back((*installed / "models").string());
  folders.push_back(PLEXUS_AE_SOURCE_MODELS);
  return folders;
}

bool looks_like_a_path(const std::string& value) {
  std::error_code error;
  const bool json = value.size() > 5 && value.compare(value.size() - 5, 5, ".json") == 0;
  return json || value.find('/') != std::string::npos || fs::is_regular_file(value, error);
}
}  // namespace

std::string bundled_models_folder() {
  for (const auto& folder : candidate_folders()) {
    std::error_code error;
    if (fs::is_directory(folder, error)) return folder;
  }
  return "";
}

std::vector<std::string> bundled_model_names() {
  std::vector<std::string> names;
  const std::string folder = bundled_models_folder();
  if (folder.empty()) return names;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(folder, error))
    if (entry.path().extension() == ".json") names.push_back(entry.path().stem().string());
  std::sort(names.begin(), names.end());
  return names;
}

ModelSpec resolve_model(const std::string& value) {
  if (value.empty()) throw ConfigError("--model is empty; give a bundled model name or a .json spec file");
  if (looks_like_a_path(value)) return ModelSpec::from_file(value);
  const std::string folder = bundled_models_folder();
  if (folder.empty()) {
    std::string searched;
    for (const auto& f : candidate_folders()) searched += (searched.empty() ? "" : ", ") + f;
    throw ConfigError("--model '" + value + "': the bundled model folder was not found (searched " + searched +
                      "); set PLEXUS_AE_MODELS or pass a .json spec file");
  }
  const auto names = bundled_model_names();
  if (std::find(names.begin(), names.end(), value) == names.end()) {
    std::string message = "unknown model '" + value + "'";
    auto close = close_matches(value, names, 1);
    if (!close.empty()) message += " (did you mean '" + close[0] + "'?)";
    std::string list;
    for (const auto& name : names) list += (list.empty() ? "" : ", ") + name;
    message += "; bundled models: " + list + " (in " + folder + "); or pass a .json spec file";
    throw ConfigError(message);
  }
  return ModelSpec::from_file((fs::path(folder) / (value + ".json")).string());
}

}  // namespace plexus::ae

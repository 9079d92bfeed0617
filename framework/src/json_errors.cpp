#include "plexus/json_errors.h"

namespace plexus {

void throw_json_error(const std::string& source, const std::string& json_path, const nlohmann::json::exception& error) {
  // what() is "[json.exception.<kind>.<id>] <reason>": keep the reason.
  std::string reason = error.what();
  const std::size_t tag_end = reason.find("] ");
  if (reason.rfind("[json.exception.", 0) == 0 && tag_end != std::string::npos) reason = reason.substr(tag_end + 2);
  throw ConfigError(source + ": " + (json_path.empty() ? std::string() : "at " + json_path + ": ") + reason);
}

}  // namespace plexus

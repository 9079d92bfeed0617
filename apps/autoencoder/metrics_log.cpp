#include "metrics_log.h"

#include <cerrno>
#include <cstring>
#include <sstream>
#include <vector>

#include "plexus/error.h"
#include "plexus/json_errors.h"
#include "plexus/json_nesting.h"

namespace plexus::ae {

MetricsLog::MetricsLog(const std::string& path, std::int64_t keep_through_step) : path_(path) {
  std::vector<std::string> kept;
  if (keep_through_step >= 0) {
    std::ifstream previous(path);
    std::string line;
    for (std::int64_t number = 1; std::getline(previous, line); ++number) {
      check_json_nesting(line, path + " line " + std::to_string(number));
      auto entry = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      const bool kept_step = read_json_from(path + " line " + std::to_string(number), "/step", [&] {
        return entry.is_object() && entry.value("step", std::int64_t{0}) <= keep_through_step;
      });
      if (kept_step) kept.push_back(line);
    }
  }
  file_.open(path, std::ios::out | std::ios::trunc);
  if (!file_) throw IoError("cannot write the metrics log '" + path + "': " + std::strerror(errno));
  for (const auto& line : kept) file_ << line << '\n';
  file_.flush();
}

void MetricsLog::write(const nlohmann::json& entry) {
  file_ << entry.dump() << '\n';
  file_.flush();
  if (!file_) throw IoError("cannot write the metrics log '" + path_ + "': " + std::strerror(errno));
}

}  // namespace plexus::ae

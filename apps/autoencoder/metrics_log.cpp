#include "metrics_log.h"

#include <sstream>
#include <vector>

#include "plexus/error.h"

namespace plexus::ae {

MetricsLog::MetricsLog(const std::string& path, std::int64_t keep_through_step) : path_(path) {
  std::vector<std::string> kept;
  if (keep_through_step >= 0) {
    std::ifstream previous(path);
    std::string line;
    while (std::getline(previous, line)) {
      auto entry = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (entry.is_object() && entry.value("step", std::int64_t{0}) <= keep_through_step) kept.push_back(line);
    }
  }
  file_.open(path, std::ios::out | std::ios::trunc);
  if (!file_) throw IoError("cannot write the metrics log '" + path + "'");
  for (const auto& line : kept) file_ << line << '\n';
  file_.flush();
}

void MetricsLog::write(const nlohmann::json& entry) {
  file_ << entry.dump() << '\n';
  file_.flush();
  if (!file_) throw IoError("cannot write the metrics log '" + path_ + "' (disk full?)");
}

}  // namespace plexus::ae

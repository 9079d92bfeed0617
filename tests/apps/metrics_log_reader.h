#pragma once
// Reading back the metrics.jsonl that plexus-ae train writes.
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace plexus::testing {

// The entries of one kind ("train" or "val") of a metrics.jsonl, in order.
inline std::vector<nlohmann::json> read_metrics(const std::string& path, const std::string& kind) {
  std::vector<nlohmann::json> entries;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    auto entry = nlohmann::json::parse(line);
    if (entry["kind"] == kind) entries.push_back(entry);
  }
  return entries;
}

}  // namespace plexus::testing

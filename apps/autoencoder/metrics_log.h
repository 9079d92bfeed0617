#pragma once
// <out>/metrics.jsonl: one JSON object per line, written as training goes
// ({"kind": "train", "step": ...} every --log-every steps, {"kind": "val",
// ...} after each validation), flushed per line so a crash loses nothing.
#include <cstdint>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

namespace plexus::ae {

class MetricsLog {
 public:
  // A fresh run (keep_through_step < 0) starts the file empty. A resumed run
  // keeps the lines up to its checkpoint's step and drops later ones, which
  // the resumed run is about to write again.
  MetricsLog(const std::string& path, std::int64_t keep_through_step);
  void write(const nlohmann::json& entry);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::ofstream file_;
};

}  // namespace plexus::ae

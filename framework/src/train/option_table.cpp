#include "plexus/train/option_table.h"

#include <algorithm>

#include <spdlog/spdlog.h>

namespace plexus::train::option_text {

namespace {

// Whole numbers as integers ("65536", "1125899906842624"), others in their shortest form ("0.5").
std::string number(double x) {
  if (std::isfinite(x) && x == std::floor(x) && std::fabs(x) <= 9007199254740992.0)
    return std::to_string(static_cast<long long>(x));
  return fmt::format("{}", x);
}

}  // namespace

std::string rule(const Bounds& b, bool saved) {
  const double max = saved ? std::min(b.max, b.saved_max) : b.max;
  const bool has_min = b.min > -HUGE_VAL, has_max = max < HUGE_VAL;
  if (has_min && has_max)
    return std::string("in ") + (b.min_open ? "(" : "[") + number(b.min) + ", " + number(max) +
           (b.max_open && max == b.max ? ")" : "]");
  if (has_min) return (b.min_open ? "> " : ">= ") + number(b.min);
  if (has_max) return (b.max_open ? "< " : "<= ") + number(max);
  return "";
}

bool within(const Bounds& b, double value, bool saved) {
  if (std::isnan(value) || (b.finite && !std::isfinite(value))) return false;
  if (b.min_open ? !(value > b.min) : !(value >= b.min)) return false;
  if (b.max_open ? !(value < b.max) : !(value <= b.max)) return false;
  return !saved || value <= b.saved_max;
}

void refuse_value(const std::string& name, const Bounds& bounds, const std::string& value) {
  throw ConfigError("--" + name + " must be " + rule(bounds, false) + bounds.note + ", got " + value);
}

void refuse_saved(const std::string& source, const std::string& key, const std::string& what,
                  const nlohmann::json& value) {
  throw IoError(source + ": at /" + key + ": must be " + what + ", got " + value.dump());
}

void warn_differs(const std::string& key, const nlohmann::json& given, const nlohmann::json& saved) {
  spdlog::warn("--{} {} differs from the checkpoint's {}; the resumed run will not match an uninterrupted one", key,
               given.dump(), saved.dump());
}

}  // namespace plexus::train::option_text

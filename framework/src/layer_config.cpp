#include "plexus/layer_config.h"

#include <algorithm>
#include <sstream>
#include <limits>

#include <nlohmann/json.hpp>

#include "plexus/error.h"
#include "plexus/registry.h"

namespace plexus {

LayerConfig::LayerConfig(std::string node_name, std::string type, const nlohmann::json& params)
    : node_name_(std::move(node_name)),
      type_(std::move(type)),
      params_(std::make_unique<nlohmann::json>(params.is_null() ? nlohmann::json::object() : params)) {
  if (!params_->is_object())
    throw ConfigError("node '" + node_name_ + "' (" + type_ + "): \"params\" must be a JSON object, got " +
                      params_->dump());
}

LayerConfig LayerConfig::describing(std::string type) {
  LayerConfig config("(description)", std::move(type), nlohmann::json::object());
  config.describing_ = true;
  return config;
}

bool LayerConfig::is_describing() const { return describing_; }
const std::vector<ParameterInfo>& LayerConfig::parameters() const { return parameters_; }

void LayerConfig::record(const std::string& key, const char* kind, bool required, const std::string& default_value,
                         const std::string& range) {
  find(key);
  for (const ParameterInfo& known : parameters_)
    if (known.key == key) return;
  parameters_.push_back(ParameterInfo{key, kind, required, default_value, range});
}

LayerConfig::~LayerConfig() = default;
LayerConfig::LayerConfig(LayerConfig&&) noexcept = default;

void LayerConfig::fail(const std::string& key, const std::string& message) const {
  throw ConfigError("node '" + node_name_ + "' (" + type_ + "): parameter '" + key + "' " + message);
}

bool LayerConfig::has(const std::string& key) const { return params_->contains(key); }

const nlohmann::json* LayerConfig::find(const std::string& key) {
  if (std::find(read_keys_.begin(), read_keys_.end(), key) == read_keys_.end()) read_keys_.push_back(key);
  auto it = params_->find(key);
  return it == params_->end() ? nullptr : &*it;
}

namespace {
// An unsigned JSON integer above INT64_MAX would wrap to a negative value.
bool fits_int64(const nlohmann::json& value) {
  return !value.is_number_unsigned() ||
         value.get<std::uint64_t>() <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
}

std::string range_text(std::int64_t min, std::int64_t max) {
  return "[" + std::to_string(min) + ", " + std::to_string(max) + "]";
}
}  // namespace

std::int64_t LayerConfig::integer(const std::string& key) {
  if (describing_) {
    record(key, "integer", true, "");
    return 0;
  }
  const nlohmann::json* value = find(key);
  if (!value) fail_missing(key, "an integer");
  if (!value->is_number_integer()) fail(key, "must be an integer, got " + value->dump());
  if (!fits_int64(*value)) fail(key, "is too large for a 64-bit integer, got " + value->dump());
  return value->get<std::int64_t>();
}

std::int64_t LayerConfig::bounded_integer(const std::string& key, std::int64_t min, std::int64_t max) {
  if (describing_) {
    record(key, "integer", true, "", range_text(min, max));
    return min;
  }
  const std::int64_t result = integer(key);
  if (result < min || result > max)
    fail(key, "must be in [" + std::to_string(min) + ", " + std::to_string(max) + "], got " + std::to_string(result));
  return result;
}

std::int64_t LayerConfig::bounded_integer(const std::string& key, std::int64_t fallback, std::int64_t min,
                                          std::int64_t max) {
  if (describing_) {
    record(key, "integer", false, std::to_string(fallback), range_text(min, max));
    return fallback;
  }
  return has(key) ? bounded_integer(key, min, max) : (find(key), fallback);
}

double LayerConfig::number(const std::string& key) {
  if (describing_) {
    record(key, "number", true, "");
    return 0.0;
  }
  const nlohmann::json* value = find(key);
  if (!value) fail_missing(key, "a number");
  if (!value->is_number()) fail(key, "must be a number, got " + value->dump());
  return value->get<double>();
}

bool LayerConfig::boolean(const std::string& key) {
  if (describing_) {
    record(key, "boolean", true, "");
    return false;
  }
  const nlohmann::json* value = find(key);
  if (!value) fail_missing(key, "true or false");
  if (!value->is_boolean()) fail(key, "must be true or false, got " + value->dump());
  return value->get<bool>();
}

std::string LayerConfig::text(const std::string& key) {
  if (describing_) {
    record(key, "string", true, "");
    return std::string();
  }
  const nlohmann::json* value = find(key);
  if (!value) fail_missing(key, "a string");
  if (!value->is_string()) fail(key, "must be a string, got " + value->dump());
  return value->get<std::string>();
}

void LayerConfig::fail_missing(const std::string& key, const std::string& what) const {
  std::vector<std::string> unread;
  for (auto it = params_->begin(); it != params_->end(); ++it)
    if (std::find(read_keys_.begin(), read_keys_.end(), it.key()) == read_keys_.end()) unread.push_back(it.key());
  const auto close = close_matches(key, unread, 1);
  std::string message = "is required (" + what + ")";
  if (!close.empty()) message += "; the params have '" + close[0] + "': did you mean '" + key + "'?";
  fail(key, message);
}

std::vector<std::int64_t> LayerConfig::read_integers(const std::string& key, const nlohmann::json& value) const {
  if (!value.is_array()) fail(key, "must be an array of integers, got " + value.dump());
  std::vector<std::int64_t> result;
  for (const auto& item : value) {
    if (!item.is_number_integer()) fail(key, "must be an array of integers, got " + value.dump());
    if (!fits_int64(item)) fail(key, "has an integer too large for 64 bits, got " + value.dump());
    result.push_back(item.get<std::int64_t>());
  }
  return result;
}

std::vector<std::int64_t> LayerConfig::integers(const std::string& key) {
  if (describing_) {
    record(key, "integer array", true, "");
    return std::vector<std::int64_t>{};
  }
  const nlohmann::json* value = find(key);
  if (!value) fail_missing(key, "an array of integers");
  return read_integers(key, *value);
}

std::int64_t LayerConfig::integer(const std::string& key, std::int64_t fallback) {
  if (describing_) {
    record(key, "integer", false, std::to_string(fallback));
    return fallback;
  }
  return has(key) ? integer(key) : (find(key), fallback);
}
double LayerConfig::number(const std::string& key, double fallback) {
  if (describing_) {
    record(key, "number", false, nlohmann::json(fallback).dump());
    return fallback;
  }
  return has(key) ? number(key) : (find(key), fallback);
}
bool LayerConfig::boolean(const std::string& key, bool fallback) {
  if (describing_) {
    record(key, "boolean", false, fallback ? "true" : "false");
    return fallback;
  }
  return has(key) ? boolean(key) : (find(key), fallback);
}
std::string LayerConfig::text(const std::string& key, const std::string& fallback) {
  if (describing_) {
    record(key, "string", false, nlohmann::json(fallback).dump());
    return fallback;
  }
  return has(key) ? text(key) : (find(key), fallback);
}

std::vector<std::int64_t> LayerConfig::integers(const std::string& key, std::vector<std::int64_t> fallback) {
  if (describing_) {
    record(key, "integer array", false, nlohmann::json(fallback).dump());
    return fallback;
  }
  const nlohmann::json* value = find(key);
  if (!value) return fallback;
  return read_integers(key, *value);
}

std::vector<double> LayerConfig::numbers(const std::string& key, std::vector<double> fallback) {
  if (describing_) {
    record(key, "number array", false, nlohmann::json(fallback).dump());
    return fallback;
  }
  const nlohmann::json* value = find(key);
  if (!value) return fallback;
  if (!value->is_array()) fail(key, "must be an array of numbers, got " + value->dump());
  std::vector<double> result;
  for (const auto& item : *value) {
    if (!item.is_number()) fail(key, "must be an array of numbers, got " + value->dump());
    result.push_back(item.get<double>());
  }
  return result;
}

void LayerConfig::check_all_used() const {
  std::vector<std::string> unknown;
  for (auto it = params_->begin(); it != params_->end(); ++it)
    if (std::find(read_keys_.begin(), read_keys_.end(), it.key()) == read_keys_.end()) unknown.push_back(it.key());
  if (unknown.empty()) return;
  std::string message = "node '" + node_name_ + "' (" + type_ + "): unknown parameter";
  message += unknown.size() > 1 ? "s " : " ";
  for (std::size_t i = 0; i < unknown.size(); ++i) message += (i ? ", '" : "'") + unknown[i] + "'";
  message += "; " + type_ + " takes: ";
  if (read_keys_.empty()) message += "no parameters";
  for (std::size_t i = 0; i < read_keys_.size(); ++i) message += (i ? ", " : "") + read_keys_[i];
  throw ConfigError(message);
}

std::string number_text(double value) {
  std::ostringstream text;
  text << value;
  return text.str();
}

}  // namespace plexus

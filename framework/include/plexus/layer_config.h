#pragma once
// LayerConfig: a layer's "params" object from a model spec, read through
// typed getters. Every key a layer reads is marked; a key left unread is a
// typo or a parameter the layer does not have, and check_all_used() reports
// it with the node name and the keys the layer does know.
//
// The same reads describe a layer type: a LayerConfig made by describing()
// records each key asked for, with its kind, its default (or that it is
// required) and its range, and hands a required getter a placeholder (the
// range's minimum, 0, false, "" or []) instead of failing. Registry::
// parameters() builds a layer once from such a config, so the parameter list
// that `plexus-ae layers` prints is read from the layer's own constructor.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace plexus {

// One parameter a layer reads, as recorded by a describing LayerConfig.
struct ParameterInfo {
  std::string key;
  std::string kind;  // "integer", "number", "boolean", "string", "integer array" or "number array"
  bool required = false;
  std::string default_value;  // as JSON ("1", "0.01", "true", "[3,3,3]"); empty when required
  std::string range;          // "[min, max]" of a bounded integer, else empty
};

class LayerConfig {
 public:
  LayerConfig(std::string node_name, std::string type, const nlohmann::json& params);
  // A config with no params that records what `type`'s layer reads (see above).
  static LayerConfig describing(std::string type);
  ~LayerConfig();
  LayerConfig(LayerConfig&&) noexcept;

  const std::string& node_name() const { return node_name_; }
  const std::string& type() const { return type_; }

  bool has(const std::string& key) const;
  // Required values: a missing key or a value of the wrong type is a ConfigError.
  std::int64_t integer(const std::string& key);
  double number(const std::string& key);
  bool boolean(const std::string& key);
  std::string text(const std::string& key);
  std::vector<std::int64_t> integers(const std::string& key);
  // Optional values with a default.
  std::int64_t integer(const std::string& key, std::int64_t fallback);
  double number(const std::string& key, double fallback);
  bool boolean(const std::string& key, bool fallback);
  std::string text(const std::string& key, const std::string& fallback);
  std::vector<std::int64_t> integers(const std::string& key, std::vector<std::int64_t> fallback);
  std::vector<double> numbers(const std::string& key, std::vector<double> fallback);
  // Integers that must lie in [min, max]: a value outside is a ConfigError
  // naming the key, the range and the value as written.
  std::int64_t bounded_integer(const std::string& key, std::int64_t min, std::int64_t max);
  std::int64_t bounded_integer(const std::string& key, std::int64_t fallback, std::int64_t min, std::int64_t max);

  // Throws ConfigError "node 'x' (T): <message>" for a bad value a layer found
  // (number_text below writes a number into such a message).
  [[noreturn]] void fail(const std::string& key, const std::string& message) const;
  // Throws ConfigError naming every key that no getter read.
  void check_all_used() const;

  // Whether this config only describes (describing()): a layer whose
  // constructor does more than read parameters can skip that work.
  bool is_describing() const;
  // The parameters read so far, in the order first read (describing configs).
  const std::vector<ParameterInfo>& parameters() const;

 private:
  const nlohmann::json* find(const std::string& key);
  // Throws "parameter 'key' is required (<what>)", naming a key of the
  // params that looks like a misspelling of it ("group" for "groups").
  [[noreturn]] void fail_missing(const std::string& key, const std::string& what) const;
  std::vector<std::int64_t> read_integers(const std::string& key, const nlohmann::json& value) const;
  std::string node_name_;
  std::string type_;
  std::unique_ptr<nlohmann::json> params_;
  // Describing: records `key` the first time it is asked for.
  void record(const std::string& key, const char* kind, bool required, const std::string& default_value,
              const std::string& range = "");
  std::vector<std::string> read_keys_;
  bool describing_ = false;
  std::vector<ParameterInfo> parameters_;
};

// A parameter's value as the layers' messages show it: the stream's shortest
// form (0.01, 1e-09, 3).
std::string number_text(double value);

}  // namespace plexus

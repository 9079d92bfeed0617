#pragma once
// The one place nlohmann::json's exceptions become Plexus errors. Its
// messages ("[json.exception.type_error.302] type must be string, but is
// number") name neither the file nor the value; read_json_from() adds both:
//   "run/checkpoint.safetensors (training settings): at /batch: type must be number, but is string".
#include <string>

#include <nlohmann/json.hpp>

#include "plexus/error.h"

namespace plexus {

// Throws ConfigError "<source>: at <json_path>: <reason>" for `error` (the
// "at" part left out when json_path is empty).
[[noreturn]] void throw_json_error(const std::string& source, const std::string& json_path,
                                   const nlohmann::json::exception& error);

// Runs `read`, code reading the value at `json_path` (a JSON pointer such
// as "/nodes/3/name", "" for the whole document) of JSON that came from
// `source`, and turns any nlohmann::json exception into that ConfigError.
template <typename Read>
auto read_json_from(const std::string& source, const std::string& json_path, Read&& read) -> decltype(read()) {
  try {
    return read();
  } catch (const nlohmann::json::exception& error) {
    throw_json_error(source, json_path, error);
  }
}

}  // namespace plexus

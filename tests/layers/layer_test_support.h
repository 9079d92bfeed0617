#pragma once
// Small helpers shared by the graph-layer tests (add, mul, concat, split,
// sigmoid, leaky_relu, pixel_shuffle).
#include <string>

#include "plexus/error.h"

namespace plexus::testing {

// The message of the ShapeError `fn` throws, or a note that it threw none.
template <typename Fn>
std::string shape_error_of(Fn&& fn) {
  try {
    fn();
  } catch (const ShapeError& e) {
    return e.what();
  }
  return "(no ShapeError thrown)";
}

// The message of the ConfigError `fn` throws, or a note that it threw none.
template <typename Fn>
std::string config_error_of(Fn&& fn) {
  try {
    fn();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no ConfigError thrown)";
}

inline bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace plexus::testing

#pragma once
// The exception types Plexus throws. Every message is a full sentence that
// names the culprit: the file, node, layer type, shape or value at fault.
#include <stdexcept>
#include <string>

namespace plexus {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// Inputs of the wrong rank, size or channel count.
class ShapeError : public Error {
 public:
  using Error::Error;
};

// A model spec or layer parameter that is malformed, unknown or out of range.
class ConfigError : public Error {
 public:
  using Error::Error;
};

// A file that is missing, unreadable, truncated or corrupt.
class IoError : public Error {
 public:
  using Error::Error;
};

// A plugin that cannot be loaded, lacks entry points or has another ABI.
class PluginError : public Error {
 public:
  using Error::Error;
};

// A failed CUDA, cuBLAS or cuRAND call, or a device that is not available.
class DeviceError : public Error {
 public:
  using Error::Error;
};

}  // namespace plexus

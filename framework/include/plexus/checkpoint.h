#pragma once
// Checkpoints in the safetensors format (an 8-byte little-endian header
// length, a JSON header naming each tensor's dtype, shape and byte range,
// then the raw little-endian data), so weights open in Python tooling.
#include <map>
#include <string>

#include "plexus/tensor.h"

namespace plexus {

struct TensorFile {
  std::map<std::string, Tensor> tensors;        // on the CPU
  std::map<std::string, std::string> metadata;  // the "__metadata__" strings
};

// Writes atomically: to "<path>.tmp-<pid>", flushed, then renamed over
// `path`, so a crash never leaves a half-written checkpoint behind.
void save_safetensors(const std::string& path, const TensorFile& file);
// Throws IoError naming the file and what is wrong (missing, truncated,
// bad header, offsets out of range, unsupported dtype).
TensorFile load_safetensors(const std::string& path);

}  // namespace plexus

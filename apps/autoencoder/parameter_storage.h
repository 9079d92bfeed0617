#pragma once
// How `plexus-ae export --storage` stores a model's parameters:
//   f32   as they are;
//   f16   every parameter as F16, rounded to the nearest (plexus/half.h);
//   int8  the weight of each Conv2d, ConvTranspose2d and FullyConnected node
//         as I8 with an f32 scale per output channel (plexus/int8.h), every
//         other parameter (biases, GDN, the entropy models) as F16.
// The coding tables export adds are not parameters: they stay as they are.
#include <map>
#include <string>

#include "plexus/checkpoint.h"
#include "plexus/model_spec.h"
#include "plexus/registry.h"

namespace plexus::ae {

// The output-channel axis of the weight of a node of type `type`, for the
// types whose weight int8 storage quantises: Conv2d [Co, Ci, k, k] -> 0,
// ConvTranspose2d [Ci, Co, k, k] -> 1, FullyConnected [out, in] -> 0;
// -1 for every other type.
int int8_weight_channel_axis(const std::string& type);

// Replaces each parameter of `file` (those of `spec`'s net) by the f32
// values the stored file will load, so that what export derives from them
// (the coding tables, the integer network) matches the file, and returns
// how save_safetensors is to store them. `storage` is f32, f16 or int8;
// IoError naming `who` for a parameter missing from the file or one that
// does not fit the storage.
CompactStorage store_parameters_as(const std::string& storage, TensorFile& file, const ModelSpec& spec,
                                   const Registry& registry, const std::string& who);

}  // namespace plexus::ae

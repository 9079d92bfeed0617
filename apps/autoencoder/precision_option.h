#pragma once
// --precision of plexus-ae train and eval: the Context's precision policy.
#include <string>

#include "plexus/context.h"

namespace plexus::ae {

// The help texts of --precision of train (default bf16) and eval (default tf32).
extern const std::string kTrainPrecisionHelp;
extern const std::string kEvalPrecisionHelp;

// The policy for `option` ("f32", "tf32", "bf16") on `device`. On CUDA it is
// the option; the CPU always computes in f32. Unknown text fails with a
// ConfigError naming it.
Precision choose_precision(const std::string& option, Device device);

}  // namespace plexus::ae

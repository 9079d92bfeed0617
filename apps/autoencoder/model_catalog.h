#pragma once
// The bundled model specs (models/specs/*.json) and how a
// --model value becomes a ModelSpec: a name of a bundled spec, or a path to
// a JSON file of the user's own.
#include <string>
#include <vector>

#include "plexus/model_spec.h"

namespace plexus::ae {

// The folder of bundled specs: $PLEXUS_AE_MODELS when set, else
// <executable>/../share/plexus/autoencoder/models (installed), else the
// source tree this executable was built from. Empty when none exists.
std::string bundled_models_folder();
// Names of the bundled specs ("bls2017", ...), sorted.
std::vector<std::string> bundled_model_names();

// A path (anything ending in .json, containing '/', or naming an existing
// file) is read as a spec file; otherwise `value` names a bundled spec.
// Throws ConfigError for an unknown name, listing the bundled ones.
ModelSpec resolve_model(const std::string& value);

}  // namespace plexus::ae

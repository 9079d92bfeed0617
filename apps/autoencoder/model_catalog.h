#pragma once
// The bundled model specs (models/specs/*.json) and how a
// --model value becomes a ModelSpec: a name of a bundled spec, or a path to
// a JSON file of the user's own; and where an installed plexus-ae finds what
// is installed with it (the bundled specs, the trained models).
#include <filesystem>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include "plexus/model_spec.h"

namespace plexus::ae {

// This process's executable: the target of /proc/self/exe. `error` is set
// when it cannot be read.
std::filesystem::path executable_path(std::error_code& error);
// <prefix>/share/plexus/autoencoder for an executable <prefix>/bin/plexus-ae,
// whether or not it exists; nullopt when the executable's path cannot be read.
std::optional<std::filesystem::path> installed_data_folder();

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

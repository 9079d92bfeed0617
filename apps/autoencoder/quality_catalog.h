#pragma once
// `plexus-ae compress --quality N`: a small catalog of shipped models, one
// per rate-distortion trade-off (models/trained/quality-catalog.json):
//   {"qualities": [{"quality": 3, "spec": "bmshj2018-hyperprior",
//                   "lambda": 0.0067, "model": "hyperprior-q3/model.safetensors"}, ...]}
// Model paths are relative to the catalog file. An entry whose model file is
// absent is a quality this copy does not ship: asking for it is an error
// that prints the commands which train and export it.
#include <string>
#include <vector>

namespace plexus::ae {

struct QualityEntry {
  int quality = 0;
  std::string spec;   // the bundled spec it was trained from
  double lambda = 0;  // its rate-distortion trade-off
  std::string model;  // as written in the catalog (relative)
  std::string path;   // the model file: the catalog's folder / model
};

struct QualityCatalog {
  std::string path;
  std::vector<QualityEntry> entries;  // sorted by quality
};

// Reads and validates the catalog: IoError when unreadable or not JSON,
// ConfigError naming the file and entry when a field is missing or wrong
// (quality an integer 1..99, each once; spec a plain name; lambda > 0;
// model a relative .safetensors path without "..").
QualityCatalog load_quality_catalog(const std::string& path);

// The model file of `quality`. ConfigError when the catalog has no such
// quality (listing those it has) or when the file is absent ("not shipped",
// with training_commands()).
std::string model_for_quality(const QualityCatalog& catalog, int quality);

// The commands that train the entry's model and export it where the catalog expects it.
std::string training_commands(const QualityEntry& entry);

}  // namespace plexus::ae

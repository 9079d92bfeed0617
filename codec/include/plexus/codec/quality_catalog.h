#pragma once
// The quality of `plexus-ae compress --quality N` and of the C API's
// plexus_codec_open_quality: a small catalog of shipped models, one
// per rate-distortion trade-off (models/trained/quality-catalog.json):
//   {"qualities": [{"quality": 3, "spec": "bmshj2018-hyperprior",
//                   "lambda": 0.0067, "model": "hyperprior-q3/model.safetensors"}, ...]}
// Model paths are relative to the catalog file. An entry whose model file is
// absent is a quality this copy does not ship: asking for it is an error
// that prints the commands which train and export it.
//
// Entries with a "level" name a rate level of a variable-rate model: several
// qualities share one model file, and a fractional quality between two of
// them takes the level in between (linearly).
#include <optional>
#include <string>
#include <vector>

namespace plexus::codec {

struct QualityEntry {
  int quality = 0;
  std::string spec;             // the bundled spec it was trained from
  double lambda = 0;            // its rate-distortion trade-off
  std::string model;            // as written in the catalog (relative)
  std::string path;             // the model file: the catalog's folder / model
  std::optional<double> level;  // a variable-rate model's rate level (>= 0)
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

// What `compress --quality Q` uses: the model file and, for a variable-rate
// model, the rate level. A whole Q is model_for_quality's entry; a
// fractional one must lie between two consecutive qualities of one
// variable-rate model (ConfigError otherwise, naming them).
struct QualityChoice {
  std::string path;
  std::optional<double> level;
};
QualityChoice choose_quality(const QualityCatalog& catalog, double quality);

// The catalog of the shipped models: $PLEXUS_AE_QUALITY_CATALOG when set,
// else <prefix>/share/plexus/autoencoder/trained/quality-catalog.json of the
// prefix this library is installed in (<prefix>/lib/libplexus_codec.so),
// else the source tree's models/trained/quality-catalog.json (a build tree).
std::string shipped_quality_catalog_path();

// The commands that train the entry's model and export it where the catalog
// expects it (a variable-rate model: with --lambdas of every entry it serves).
std::string training_commands(const QualityCatalog& catalog, const QualityEntry& entry);

}  // namespace plexus::codec

#include "plexus/codec/quality_catalog.h"

#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "plexus/error.h"
#include "plexus/json_nesting.h"

namespace plexus::codec {

namespace fs = std::filesystem;

namespace {

std::string lambda_text(double lambda) {
  std::ostringstream text;
  text << lambda;
  return text.str();
}

bool plain_name(const std::string& name) {
  return !name.empty() && name.find('/') == std::string::npos && name.find("..") == std::string::npos;
}

bool relative_model_path(const std::string& model) {
  const fs::path path(model);
  if (model.empty() || path.is_absolute() || path.extension() != ".safetensors") return false;
  for (const fs::path& part : path)
    if (part == "..") return false;
  return true;
}

}  // namespace

QualityCatalog load_quality_catalog(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw IoError("cannot read the quality catalog '" + path + "'");
  const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  check_json_nesting(text, "the quality catalog '" + path + "'");
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw IoError("the quality catalog '" + path + "' is not valid JSON: " + e.what());
  }
  if (!json.is_object() || !json.contains("qualities") || !json["qualities"].is_array())
    throw ConfigError("the quality catalog '" + path + "' needs a \"qualities\" array");
  QualityCatalog catalog;
  catalog.path = path;
  std::set<int> seen;
  for (std::size_t n = 0; n < json["qualities"].size(); ++n) {
    const nlohmann::json& item = json["qualities"][n];
    const std::string where = "the quality catalog '" + path + "', entry " + std::to_string(n);
    auto bad = [&](const std::string& problem) { throw ConfigError(where + ": " + problem); };
    if (!item.is_object()) bad("not an object");
    QualityEntry entry;
    if (!item.contains("quality") || !item["quality"].is_number_integer()) bad("\"quality\" must be an integer");
    entry.quality = item["quality"].get<int>();
    if (entry.quality < 1 || entry.quality > 99)
      bad("\"quality\" " + std::to_string(entry.quality) + " is not in 1..99");
    if (!seen.insert(entry.quality).second) bad("quality " + std::to_string(entry.quality) + " is listed twice");
    if (!item.contains("spec") || !item["spec"].is_string() || !plain_name(item["spec"].get<std::string>()))
      bad("\"spec\" must name a bundled model spec");
    entry.spec = item["spec"].get<std::string>();
    if (!item.contains("lambda") || !item["lambda"].is_number() || !(item["lambda"].get<double>() > 0) ||
        !std::isfinite(item["lambda"].get<double>()))
      bad("\"lambda\" must be a number > 0");
    entry.lambda = item["lambda"].get<double>();
    if (!item.contains("model") || !item["model"].is_string() || !relative_model_path(item["model"].get<std::string>()))
      bad("\"model\" must be a .safetensors path relative to the catalog, without \"..\"");
    entry.model = item["model"].get<std::string>();
    entry.path = (fs::path(path).parent_path() / entry.model).string();
    if (item.contains("level")) {
      if (!item["level"].is_number() || !(item["level"].get<double>() >= 0) || item["level"].get<double>() > 1000)
        bad("\"level\" must be a number in [0, 1000] (a variable-rate model's rate level)");
      entry.level = item["level"].get<double>();
    }
    catalog.entries.push_back(std::move(entry));
  }
  std::sort(catalog.entries.begin(), catalog.entries.end(),
            [](const QualityEntry& a, const QualityEntry& b) { return a.quality < b.quality; });
  return catalog;
}

std::string training_commands(const QualityCatalog& catalog, const QualityEntry& entry) {
  const std::string run = "runs/" + fs::path(entry.model).parent_path().filename().string();
  std::string trade_off = " --lambda " + lambda_text(entry.lambda);
  if (entry.level) {  // every rate level of the model, in level order
    std::vector<const QualityEntry*> levels;
    for (const QualityEntry& other : catalog.entries)
      if (other.path == entry.path && other.level) levels.push_back(&other);
    std::sort(levels.begin(), levels.end(), [](auto* a, auto* b) { return *a->level < *b->level; });
    trade_off = " --lambdas ";
    for (std::size_t k = 0; k < levels.size(); ++k) trade_off += (k ? "," : "") + lambda_text(levels[k]->lambda);
  }
  return "  plexus-ae train --data BSDS500/train --model " + entry.spec + trade_off +
         " --batch 16 --patch 256 --steps 1000000 --time-limit 1200 --device cuda --out " + run +
         "\n  plexus-ae export --model " + run + "/model.safetensors --storage int8 --out " + entry.path +
         "\n(BSDS500/train: the 400 training images of BSDS500, the Berkeley segmentation data set; "
         "--time-limit 1200 is 20 minutes of training on one GPU)";
}

std::string model_for_quality(const QualityCatalog& catalog, int quality) {
  for (const QualityEntry& entry : catalog.entries) {
    if (entry.quality != quality) continue;
    std::error_code error;
    if (fs::is_regular_file(entry.path, error)) return entry.path;
    throw ConfigError("quality " + std::to_string(quality) + " (" + entry.spec + ", lambda " +
                      lambda_text(entry.lambda) + ") is not shipped with this plexus-ae: '" + entry.path +
                      "' is absent. Train it with:\n" + training_commands(catalog, entry));
  }
  std::string listed, shipped;
  for (const QualityEntry& entry : catalog.entries) {
    listed += (listed.empty() ? "" : ", ") + std::to_string(entry.quality);
    std::error_code error;
    if (fs::is_regular_file(entry.path, error))
      shipped += (shipped.empty() ? "" : ", ") + std::to_string(entry.quality);
  }
  throw ConfigError("no quality " + std::to_string(quality) + " in '" + catalog.path + "'; it lists " +
                    (listed.empty() ? "none" : listed) + " (shipped: " + (shipped.empty() ? "none" : shipped) + ")");
}

QualityChoice choose_quality(const QualityCatalog& catalog, double quality) {
  const double whole = std::floor(quality);
  if (quality == whole) {
    QualityChoice choice{model_for_quality(catalog, static_cast<int>(whole)), std::nullopt};
    for (const QualityEntry& entry : catalog.entries)
      if (entry.quality == static_cast<int>(whole)) choice.level = entry.level;
    return choice;
  }
  const QualityEntry *below = nullptr, *above = nullptr;
  for (const QualityEntry& entry : catalog.entries) {
    if (entry.quality == static_cast<int>(whole)) below = &entry;
    if (entry.quality == static_cast<int>(whole) + 1) above = &entry;
  }
  std::ostringstream text;
  text << quality;
  if (!below || !above || below->path != above->path || !below->level || !above->level)
    throw ConfigError("quality " + text.str() + " lies between qualities " + std::to_string(int(whole)) + " and " +
                      std::to_string(int(whole) + 1) + ", which are not rate levels of one variable-rate model in '" +
                      catalog.path + "'; give a whole quality");
  QualityChoice choice{model_for_quality(catalog, below->quality), std::nullopt};
  choice.level = *below->level + (quality - whole) * (*above->level - *below->level);
  return choice;
}

std::string shipped_quality_catalog_path() {
  if (const char* env = std::getenv("PLEXUS_AE_QUALITY_CATALOG")) return env;
  Dl_info library{};
  if (::dladdr(reinterpret_cast<void*>(&shipped_quality_catalog_path), &library) != 0 && library.dli_fname) {
    std::error_code error;
    const fs::path lib = fs::weakly_canonical(library.dli_fname, error);
    const fs::path installed =
        lib.parent_path().parent_path() / "share/plexus/autoencoder/trained/quality-catalog.json";
    if (!error && fs::is_regular_file(installed, error)) return installed.string();
  }
  return std::string(PLEXUS_CODEC_SOURCE_TRAINED) + "/quality-catalog.json";
}

}  // namespace plexus::codec

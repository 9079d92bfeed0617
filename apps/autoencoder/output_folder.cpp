#include "output_folder.h"

#include <algorithm>
#include <filesystem>
#include <iterator>

#include <spdlog/spdlog.h>

#include "plexus/atomic_file.h"
#include "plexus/error.h"

namespace plexus::ae {

namespace fs = std::filesystem;

namespace {

void remove_stale_files(const std::string& folder) {
  for (const auto& path : remove_stale_temporary_files(folder))
    spdlog::info("removed '{}', a temporary file left by a run that was killed while writing", path);
}

// True when `inner` is `outer` or lies below it (symbolic links resolved,
// neither needs to exist yet).
bool is_inside(const fs::path& inner, const fs::path& outer) {
  std::error_code error;
  const fs::path a = fs::weakly_canonical(fs::absolute(inner, error), error);
  const fs::path b = fs::weakly_canonical(fs::absolute(outer, error), error);
  if (error) return false;
  auto mismatch = std::mismatch(b.begin(), b.end(), a.begin(), a.end());
  return mismatch.first == b.end() || (std::next(mismatch.first) == b.end() && mismatch.first->empty());
}

}  // namespace

void create_output_folder(const std::string& folder) {
  std::error_code error;
  fs::create_directories(folder, error);
  if (error) throw IoError("cannot create the output folder '" + folder + "': " + error.message());
}

void prepare_train_output(const TrainOptions& o) {
  const fs::path out = o.out;
  std::error_code error;
  if (!fs::is_directory(out, error)) return;
  remove_stale_files(o.out);
  // An interrupted run (it has a checkpoint) is train's own case: --resume.
  if (o.resume || fs::exists(out / "checkpoint.safetensors", error)) return;
  std::string earlier;
  for (const char* name : {"model.safetensors", "metrics.jsonl"})
    if (fs::exists(out / name, error)) earlier += (earlier.empty() ? "" : " and ") + std::string(name);
  if (earlier.empty()) return;
  if (!o.overwrite)
    throw ConfigError("'" + o.out + "' already holds " + earlier +
                      " of an earlier run; pass --overwrite to replace them, or choose another --out");
  spdlog::warn("--overwrite: replacing {} in '{}'", earlier, o.out);
}

void prepare_eval_output(const EvalOptions& o) {
  if (o.out.empty()) return;
  if (is_inside(o.out, o.data))
    throw ConfigError("--out '" + o.out + "' is inside the --data folder '" + o.data +
                      "'; the reconstructions would be read as images to evaluate the next time. Choose a folder "
                      "outside --data");
  std::error_code error;
  if (fs::is_directory(o.out, error)) remove_stale_files(o.out);
}

}  // namespace plexus::ae

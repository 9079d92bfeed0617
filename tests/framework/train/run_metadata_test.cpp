// What the trainer keeps of a run in a checkpoint's metadata
// (plexus/train/run_metadata.h): the progress, with the keys of earlier
// checkpoints, and the settings, checked by the options' table.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "plexus/error.h"
#include "plexus/testing/gtest_helpers.h"
#include "plexus/train/run_metadata.h"

namespace plexus::train {
namespace {

const RunMetadataKeys kKeys{"toy.train", "toy.progress", "toy train"};

TEST(RunMetadata, ProgressRoundTripsThroughCheckpointMetadata) {
  RunProgress p{nlohmann::json{{"kind", "plateau"}, {"rate", 1e-4}}, 123.5, 27.25};
  TensorFile file;
  file.metadata["toy.progress"] = progress_json(p).dump();
  RunProgress back = progress_from_checkpoint(file, "run/checkpoint.safetensors", kKeys);
  EXPECT_DOUBLE_EQ(back.elapsed_seconds, 123.5);
  EXPECT_DOUBLE_EQ(back.best_validation, 27.25);
  EXPECT_EQ(back.lr_schedule["rate"], 1e-4);
  RunProgress none =
      progress_from_checkpoint(TensorFile{}, "run/checkpoint.safetensors", kKeys);  // an older checkpoint
  EXPECT_EQ(none.elapsed_seconds, 0.0);
  EXPECT_TRUE(std::isnan(none.best_validation));
}

// The progress as earlier checkpoints wrote it, by hand: its keys are read.
TEST(RunMetadata, ProgressOfAnEarlierCheckpointIsRead) {
  TensorFile file;
  file.metadata["toy.progress"] =
      R"({"lr_schedule": {"kind": "step", "rate": 0.5}, "elapsed_seconds": 60, "best_val_psnr": 31.5})";
  const RunProgress p = progress_from_checkpoint(file, "run/checkpoint.safetensors", kKeys);
  EXPECT_EQ(p.lr_schedule.at("kind"), "step");
  EXPECT_EQ(p.elapsed_seconds, 60.0);
  EXPECT_EQ(p.best_validation, 31.5);
  const nlohmann::json written = progress_json(p);
  EXPECT_EQ(written, nlohmann::json::parse(file.metadata.at("toy.progress")));
  EXPECT_TRUE(progress_json(RunProgress{}).at("best_val_psnr").is_null());  // NaN: JSON has none
}

struct Toy {
  int batch = 8;
  std::string data;
};

TEST(RunMetadata, SettingsAreReadAndCheckedByTheTable) {
  OptionTable<Toy> table;
  table.add("batch", &Toy::batch, "patches").changes_the_run().range(Bounds::in(1, 64));
  table.add("data", &Toy::data, "images").changes_the_run();
  TensorFile file;
  file.metadata["toy.train"] = R"({"batch": 4, "data": "images"})";
  EXPECT_EQ(settings_from_checkpoint(file, "a.safetensors", kKeys, table).at("batch"), 4);
  file.metadata["toy.train"] = R"({"batch": 65, "data": "images"})";
  testing::expect_error<IoError>(
      [&] { settings_from_checkpoint(file, "a.safetensors", kKeys, table); },
      {"a.safetensors (training settings): at /batch: must be an integer in [1, 64], got 65"});
  file.metadata["toy.train"] = "not json";
  testing::expect_error<IoError>([&] { settings_from_checkpoint(file, "a.safetensors", kKeys, table); },
                                 {"'a.safetensors' carries unreadable toy training settings: not json"});
  testing::expect_error<IoError>([&] { settings_from_checkpoint(TensorFile{}, "a.safetensors", kKeys, table); },
                                 {"'a.safetensors' carries no toy training settings; was it written by toy train?"});
}

// Settings or progress nested 100,000 levels deep (a few hundred kilobytes) are refused before they are
// built, naming the file and the key: copying or printing them would recurse once per level.
TEST(RunMetadata, DeeplyNestedMetadataIsRefusedNamingFileAndKey) {
  OptionTable<Toy> table;
  table.add("batch", &Toy::batch, "patches").changes_the_run().range(Bounds::in(1, 64));
  const std::string deep = R"({"batch":)" + std::string(100000, '[') + std::string(100000, ']') + "}";
  TensorFile file;
  file.metadata["toy.train"] = deep;
  testing::expect_error<ConfigError>(
      [&] { settings_from_checkpoint(file, "a.safetensors", kKeys, table); },
      {"'a.safetensors' (metadata \"toy.train\"): the JSON nests arrays or objects more than 64 levels deep"});
  file.metadata["toy.progress"] = deep;
  testing::expect_error<ConfigError>(
      [&] { progress_from_checkpoint(file, "a.safetensors", kKeys); },
      {"'a.safetensors' (metadata \"toy.progress\"): the JSON nests arrays or objects more than 64 levels deep"});
}

}  // namespace
}  // namespace plexus::train

#pragma once
// The options of `plexus-ae train` as one table (plexus/train/option_table.h):
// its own rows and the trainer's, each declared once. The table gives the
// command line, the settings a checkpoint keeps, their check when read back
// and their restore on --resume.
#include <string>

#include <nlohmann/json.hpp>

#include "options.h"
#include "plexus/train/option_table.h"
#include "plexus/train/run_metadata.h"

namespace plexus::ae {

using TrainOptionTable = train::OptionTable<TrainOptions>;

// Where plexus-ae keeps a run in a checkpoint's metadata (the keys of every
// checkpoint plexus-ae has written).
extern const train::RunMetadataKeys kTrainRunKeys;

// The table; `bundled_models` ("bls2017, ...") goes into --model's help.
TrainOptionTable train_option_table(const std::string& bundled_models);

// What a checkpoint keeps of the settings: the saved rows, and the model's stride.
nlohmann::json train_settings(const TrainOptionTable& table, const TrainOptions& options, int stride);

}  // namespace plexus::ae

// The declarative table of a training command's options
// (plexus/train/option_table.h, option_table_cli.h) on a toy command: the
// command-line options it declares, their defaults, the range checks of
// the command line and of saved settings, and the restore on --resume.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "plexus/error.h"
#include "plexus/testing/gtest_helpers.h"
#include "plexus/train/option_table_cli.h"
#include "plexus/train/trainer_options.h"

namespace plexus::train {
namespace {

struct Toy : TrainerOptions {
  std::string data;
  double weight = 0.5;
  std::vector<double> levels;
  std::vector<std::string> plugins;
  int workers = 2;
  bool fast = false;
};

OptionTable<Toy> toy_table() {
  OptionTable<Toy> t;
  t.add("data", &Toy::data, "training images").changes_the_run().type("DIR");
  t.add("weight", &Toy::weight, "loss weight").changes_the_run().range(Bounds::above(0).finite_only());
  t.add("levels", &Toy::levels, "one weight per level").changes_the_run().range(Bounds::above(0).finite_only());
  add_step_options(t);
  add_trainer_options(t);
  t.add("plugin", &Toy::plugins, "a plugin to load (repeatable)");
  t.add("workers", &Toy::workers, "decoding threads").range(Bounds::in(0, 16).with_note(" threads"));
  t.add("fast", &Toy::fast, "a flag");
  return t;
}

struct Parsed {
  Toy options;
  std::set<std::string> given;
};

Parsed parse(const std::string& line) {
  const OptionTable<Toy> table = toy_table();
  Parsed parsed;
  CLI::App app;
  app.option_defaults()->always_capture_default();
  add_options(app, table, parsed.options);
  app.parse(line, false);
  parsed.given = given_options(app);
  return parsed;
}

TEST(OptionTable, TheCommandLineIsDeclaredFromTheRows) {
  const Parsed p = parse("--data imgs --weight 2 --levels 0.1,0.2 --steps 7 --lr 0.01 --cuda-graph off "
                         "--plugin a.so --plugin b.so --fast --checkpoint-every 3 --lr-schedule step");
  EXPECT_EQ(p.options.data, "imgs");
  EXPECT_EQ(p.options.weight, 2.0);
  EXPECT_EQ(p.options.levels, (std::vector<double>{0.1, 0.2}));
  EXPECT_EQ(p.options.steps, 7);
  EXPECT_EQ(p.options.lr, 0.01);
  EXPECT_FALSE(p.options.cuda_graph);
  EXPECT_EQ(p.options.plugins, (std::vector<std::string>{"a.so", "b.so"}));
  EXPECT_TRUE(p.options.fast);
  EXPECT_EQ(p.options.checkpoint_every, 3);
  EXPECT_EQ(p.options.lr_schedule, "step");
  EXPECT_EQ(p.given, (std::set<std::string>{"data", "weight", "levels", "steps", "lr", "cuda_graph", "plugin", "fast",
                                            "checkpoint_every", "lr_schedule"}));
}

TEST(OptionTable, DefaultsAreTheStructsAndShownInTheHelp) {
  const Parsed p = parse("");
  EXPECT_TRUE(p.given.empty());
  EXPECT_EQ(p.options.steps, 100000);
  EXPECT_EQ(p.options.batch, 8);
  EXPECT_EQ(p.options.lr, 1e-4);
  EXPECT_TRUE(p.options.cuda_graph);
  EXPECT_EQ(p.options.lr_schedule, "plateau");
  EXPECT_EQ(p.options.gradient_bucket_mb, 4.0);

  const OptionTable<Toy> table = toy_table();
  Toy options;
  CLI::App app;
  app.option_defaults()->always_capture_default();
  add_options(app, table, options);
  EXPECT_EQ(app.get_option("--lr-decay")->get_default_str(), "0.5");
  EXPECT_EQ(app.get_option("--cuda-graph")->get_default_str(), "on");
  EXPECT_EQ(app.get_option("--batch")->get_default_str(), "8");
  const std::string help = app.help();
  EXPECT_NE(help.find("--data DIR"), std::string::npos) << help;
  EXPECT_NE(help.find("--cuda-graph on|off"), std::string::npos) << help;
  EXPECT_NE(help.find("Adam learning rate"), std::string::npos) << help;
  EXPECT_THROW(app.parse("--cuda-graph maybe", false), CLI::ValidationError);
}

TEST(OptionTable, ValuesOutOfRangeAreRefusedNamingTheOption) {
  const OptionTable<Toy> table = toy_table();
  EXPECT_NO_THROW(table.validate(Toy{}));
  auto refused = [&](const std::string& line, const std::string& message) {
    const Parsed p = parse(line);
    testing::expect_error<ConfigError>([&] { table.validate(p.options); }, {message});
  };
  refused("--weight 0", "--weight must be > 0, got 0.000000");
  refused("--weight inf", "--weight must be > 0, got inf");
  refused("--batch 0", "--batch must be in [1, 65536], got 0");
  refused("--steps 0", "--steps must be in [1, 1125899906842624], got 0");
  refused("--workers 17", "--workers must be in [0, 16] threads, got 17");
  refused("--log-every 0", "--log-every must be >= 1, got 0");
  refused("--lr-final-fraction 1", "--lr-final-fraction must be in (0, 1), got 1.000000");
  refused("--lr-patience 0", "--lr-patience must be >= 1, got 0");
  refused("--time-limit -5", "--time-limit must be >= 0 seconds, got -5.000000");
  // saved_at_most bounds only saved values: a huge interval is accepted on the command line.
  EXPECT_NO_THROW(table.validate(parse("--checkpoint-every 1000000000000000000").options));
}

TEST(OptionTable, SavesTheSavedRowsOnly) {
  const OptionTable<Toy> table = toy_table();
  Toy o;
  o.data = "imgs";
  o.levels = {0.25};
  const nlohmann::json saved = table.save(o);
  EXPECT_EQ(saved.at("data"), "imgs");
  EXPECT_EQ(saved.at("levels"), nlohmann::json({0.25}));
  EXPECT_EQ(saved.at("lr"), 1e-4);
  EXPECT_EQ(saved.at("checkpoint_every"), 1000);
  EXPECT_TRUE(saved.at("seed").is_number_unsigned());
  for (const char* not_saved : {"fast", "plugin", "workers", "time_limit", "cuda_graph", "gpus", "rank_timeout",
                                "gradient_bucket_mb", "replica_check_every"})
    EXPECT_FALSE(saved.contains(not_saved)) << not_saved;
}

TEST(OptionTable, RestoresWhatWasNotGivenAgain) {
  const OptionTable<Toy> table = toy_table();
  Toy earlier;
  earlier.data = "imgs";
  earlier.weight = 3;
  earlier.steps = 500;
  earlier.lr = 0.02;
  earlier.seed = 18446744073709551615ULL;
  earlier.lr_schedule = "final";
  const nlohmann::json saved = nlohmann::json::parse(table.save(earlier).dump());
  EXPECT_NO_THROW(table.check_saved(saved, "s"));
  Toy resumed;
  resumed.steps = 900;
  resumed.lr = 0.5;
  table.restore(resumed, saved, {"steps", "lr"});
  EXPECT_EQ(resumed.data, "imgs");
  EXPECT_EQ(resumed.weight, 3.0);
  EXPECT_EQ(resumed.seed, 18446744073709551615ULL);
  EXPECT_EQ(resumed.lr_schedule, "final");
  EXPECT_EQ(resumed.steps, 900);  // given again
  EXPECT_EQ(resumed.lr, 0.5);
  Toy from_nothing;
  table.restore(from_nothing, nlohmann::json::object(), {});  // an older checkpoint without a key keeps the default
  EXPECT_EQ(from_nothing.weight, 0.5);
}

TEST(OptionTable, BadSavedValuesAreRefusedNamingTheKey) {
  const OptionTable<Toy> table = toy_table();
  auto refused = [&](const char* key, const nlohmann::json& value, const std::string& message) {
    testing::expect_error<IoError>(
        [&] {
          table.check_saved({{key, value}}, "ckpt");
        },
        {std::string("ckpt: at /") + key + ": must be " + message});
  };
  refused("data", 1, "a string, got 1");
  refused("weight", -1, "a finite number > 0, got -1");
  refused("weight", "x", "a finite number > 0, got \"x\"");
  refused("levels", {1, 0}, "a list of at most 1000 finite numbers > 0, got [1,0]");
  refused("levels", std::vector<double>(1001, 1.0), "a list of at most 1000 finite numbers > 0");
  refused("batch", 65537, "an integer in [1, 65536], got 65537");
  refused("batch", 2.5, "an integer in [1, 65536], got 2.5");
  refused("seed", -3, "an integer in [0, 2^64 - 1], got -3");
  refused("checkpoint_every", 1e300, "an integer in [0, 1125899906842624], got 1e+300");
  refused("lr_patience", 0, "an integer in [1, 2147483647], got 0");
  refused("lr_step_every", "10", "an integer in [-9223372036854775808, 9223372036854775807], got \"10\"");
  refused("lr_schedule", nullptr, "a string, got null");
  // Rows that are not saved are not read back: their keys are ignored.
  EXPECT_NO_THROW(table.check_saved({{"workers", "many"}, {"unknown", 1}}, "ckpt"));
}

}  // namespace
}  // namespace plexus::train

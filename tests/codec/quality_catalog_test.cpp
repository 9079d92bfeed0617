// compress --quality's catalog (quality_catalog.h): validation of entries,
// the model of a shipped quality, the message and training command for one
// not shipped, and the catalog in the repository.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "plexus/error.h"
#include "plexus/codec/quality_catalog.h"

namespace plexus::ae {
namespace {

namespace fs = std::filesystem;

class QualityCatalogTest : public ::testing::Test {
 protected:
  QualityCatalogTest() {
    folder = fs::temp_directory_path() / ("plexus-quality-catalog-" + std::to_string(::getpid()));
    fs::remove_all(folder);
    fs::create_directories(folder / "q2");
    std::ofstream(folder / "q2" / "model.safetensors") << "stand-in";
  }
  ~QualityCatalogTest() override { fs::remove_all(folder); }
  std::string write(const std::string& qualities) {
    const std::string path = (folder / "catalog.json").string();
    std::ofstream(path) << "{\"qualities\": [" << qualities << "]}";
    return path;
  }
  std::string error_of(const std::string& qualities, int quality = 1) {
    try {
      model_for_quality(load_quality_catalog(write(qualities)), quality);
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  }
  fs::path folder;
};

const char* kTwo =
    R"({"quality": 2, "spec": "bmshj2018-hyperprior", "lambda": 0.0035, "model": "q2/model.safetensors"},
       {"quality": 5, "spec": "bmshj2018-hyperprior", "lambda": 0.025, "model": "q5/model.safetensors"})";

TEST_F(QualityCatalogTest, AShippedQualityGivesItsModelFile) {
  const QualityCatalog catalog = load_quality_catalog(write(kTwo));
  ASSERT_EQ(catalog.entries.size(), 2u);
  EXPECT_EQ(catalog.entries[1].lambda, 0.025);
  EXPECT_EQ(fs::path(model_for_quality(catalog, 2)), folder / "q2" / "model.safetensors");
}

TEST_F(QualityCatalogTest, AQualityNotShippedSaysSoAndHowToTrainIt) {
  const std::string message = error_of(kTwo, 5);
  EXPECT_NE(message.find("quality 5 (bmshj2018-hyperprior, lambda 0.025) is not shipped with this plexus-ae"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("plexus-ae train --data BSDS500/train --model bmshj2018-hyperprior --lambda 0.025"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("plexus-ae export --model runs/q5/model.safetensors --storage int8 --out " +
                         (folder / "q5" / "model.safetensors").string()),
            std::string::npos)
      << message;
  const std::string unknown = error_of(kTwo, 4);
  EXPECT_NE(unknown.find("no quality 4"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("it lists 2, 5 (shipped: 2)"), std::string::npos) << unknown;
}

TEST_F(QualityCatalogTest, MalformedEntriesAreRefusedByName) {
  auto refused = [&](const std::string& entry, const std::string& fragment) {
    const std::string message = error_of(entry);
    EXPECT_NE(message.find("entry 0"), std::string::npos) << message;
    EXPECT_NE(message.find(fragment), std::string::npos) << message;
  };
  refused(R"({"quality": 0, "spec": "s", "lambda": 0.1, "model": "a.safetensors"})", "not in 1..99");
  refused(R"({"quality": 1.5, "spec": "s", "lambda": 0.1, "model": "a.safetensors"})",
          "\"quality\" must be an integer");
  refused(R"({"quality": 1, "spec": "s", "lambda": -1, "model": "a.safetensors"})", "\"lambda\"");
  refused(R"({"quality": 1, "spec": "../s", "lambda": 0.1, "model": "a.safetensors"})", "\"spec\"");
  refused(R"({"quality": 1, "spec": "s", "lambda": 0.1, "model": "../a.safetensors"})", "\"model\"");
  refused(R"({"quality": 1, "spec": "s", "lambda": 0.1, "model": "/abs/a.safetensors"})", "\"model\"");
  refused(R"({"quality": 1, "spec": "s", "lambda": 0.1, "model": "a.json"})", "\"model\"");
  refused(R"({"quality": 1, "spec": "s", "lambda": 0.1, "level": -1, "model": "a.safetensors"})",
          "\"level\" must be a number in [0, 1000]");
  refused(R"({"quality": 1, "spec": "s", "lambda": 0.1, "level": "2", "model": "a.safetensors"})",
          "\"level\" must be a number in [0, 1000]");
  const std::string twice = error_of(R"({"quality": 1, "spec": "s", "lambda": 0.1, "model": "a.safetensors"},
                                        {"quality": 1, "spec": "s", "lambda": 0.2, "model": "b.safetensors"})");
  EXPECT_NE(twice.find("quality 1 is listed twice"), std::string::npos) << twice;
  std::ofstream(folder / "catalog.json") << "{not json";
  EXPECT_THROW(load_quality_catalog((folder / "catalog.json").string()), IoError);
}

// A catalog nested 100,000 levels deep is refused before it is built (copying it would recurse once per level).
TEST_F(QualityCatalogTest, DeeplyNestedCatalogIsRefusedByName) {
  const std::string message = error_of("{\"quality\": " + std::string(100000, '[') + std::string(100000, ']') + "}");
  EXPECT_NE(message.find("the quality catalog '" + (folder / "catalog.json").string() +
                         "': the JSON nests arrays or objects more than 64 levels deep"),
            std::string::npos)
      << message;
}

TEST(QualityCatalogRepository, TheCatalogInTheRepositoryIsValid) {
  const QualityCatalog catalog =
      load_quality_catalog(std::string(PLEXUS_SOURCE_DIR) + "/models/trained/quality-catalog.json");
  // Qualities 1 to 6: the levels 0 to 5 of one shipped variable-rate model, lambdas increasing.
  ASSERT_EQ(catalog.entries.size(), 6u);
  for (std::size_t k = 0; k < catalog.entries.size(); ++k) {
    const QualityEntry& entry = catalog.entries[k];
    EXPECT_EQ(entry.quality, static_cast<int>(k + 1));
    EXPECT_EQ(entry.spec, "mbt2018-mean-vr");
    EXPECT_EQ(entry.level, static_cast<double>(k));
    EXPECT_EQ(entry.path, catalog.entries[0].path);
    if (k > 0) EXPECT_GT(entry.lambda, catalog.entries[k - 1].lambda);
  }
  EXPECT_TRUE(std::filesystem::is_regular_file(catalog.entries[0].path)) << catalog.entries[0].path;
}

}  // namespace
}  // namespace plexus::ae

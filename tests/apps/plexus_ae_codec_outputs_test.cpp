// Where plexus-ae compress and decompress write, as a new user meets it:
// decompress's default output never names the original image, and every
// problem with -o is refused before any model is loaded, with the system's
// reason, leaving nothing behind.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "apps/cli_runner.h"
#include "plexus/data/image.h"

namespace plexus {
namespace {

namespace fs = std::filesystem;
using testing::contains;
using testing::ScratchFolder;

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The refusals come before the model is loaded: a model that does not exist
// would otherwise be the first error.
class PlexusAeCodecOutputs : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::save_png(folder / "a/x.png", testing::position_image(16, 16));
    testing::save_png(folder / "b/x.png", testing::position_image(16, 16));
    absent_model = folder / "absent.safetensors";
  }
  testing::CommandResult run(std::vector<std::string> args) {
    args.insert(args.end(), {"--device", "cpu"});
    return testing::run_plexus_ae(args, folder.path());
  }
  // Refused with exit code 1 and `message`, before the model was looked at.
  void expect_refused(const testing::CommandResult& result, const std::string& message) {
    EXPECT_EQ(result.exit_code, 1) << result.describe();
    EXPECT_TRUE(contains(result.err, message)) << result.err;
    EXPECT_FALSE(contains(result.err, "absent.safetensors")) << result.err;
  }
  ScratchFolder folder{"ae-codec-outputs"};
  std::string absent_model;
};

TEST_F(PlexusAeCodecOutputs, SeveralInputsNeedAFolderOutput) {
  auto result =
      run({"compress", "--model", absent_model, folder / "a/x.png", folder / "b/x.png", "-o", folder / "one.pxae"});
  expect_refused(result, "several inputs need -o to be a folder: end it with '/' or name an existing folder");
  EXPECT_FALSE(fs::exists(folder / "one.pxae"));
}

TEST_F(PlexusAeCodecOutputs, InputsOfTheSameNameAreRefusedWithoutCreatingTheFolder) {
  auto result =
      run({"compress", "--model", absent_model, folder / "a/x.png", folder / "b/x.png", "-o", folder / "out/"});
  expect_refused(result, "would both be written to '" + (folder / "out/x.pxae") + "'");
  EXPECT_FALSE(fs::exists(folder / "out"));
}

TEST_F(PlexusAeCodecOutputs, DecompressWritesOnlyPngNames) {
  std::ofstream(folder / "x.pxae") << "PXAE";
  for (const std::string name : {"out.jpg", "out"}) {
    auto result = run({"decompress", "--model", absent_model, folder / "x.pxae", "-o", folder / name});
    expect_refused(result, "decompress writes PNG images; give a name ending in .png");
    EXPECT_FALSE(fs::exists(folder / name));
  }
}

TEST_F(PlexusAeCodecOutputs, CompressRefusesImageNames) {
  for (const std::string name : {"out.png", "out.JPG", "out.jpeg"}) {
    auto result = run({"compress", "--model", absent_model, folder / "a/x.png", "-o", folder / name});
    expect_refused(result, "-o '" + (folder / name) + "': compress writes .pxae files, not ");
    expect_refused(result, "give a name such as '" + (folder / "out.pxae") + "'");
    EXPECT_FALSE(fs::exists(folder / name));
  }
}

// The folders made for the outputs of a batch in which nothing was written are removed again.
TEST_F(PlexusAeCodecOutputs, AFailedBatchLeavesNoEmptyFolders) {
  std::ofstream(folder / "x.pxae") << "PXAE";
  auto decompressed = run({"decompress", "--model", absent_model, folder / "x.pxae", "-o", folder / "new/deep/"});
  EXPECT_EQ(decompressed.exit_code, 1) << decompressed.describe();
  EXPECT_TRUE(contains(decompressed.err, "absent.safetensors")) << decompressed.err;
  EXPECT_FALSE(fs::exists(folder / "new")) << "the folders made for the outputs were left behind";
  auto compressed = run({"compress", "--model", absent_model, folder / "a/x.png", "-o", folder / "new/one/x.pxae"});
  EXPECT_EQ(compressed.exit_code, 1) << compressed.describe();
  EXPECT_FALSE(fs::exists(folder / "new"));
  EXPECT_TRUE(fs::exists(folder / "a/x.png"));  // folders that were there before are kept
}

TEST_F(PlexusAeCodecOutputs, AnOutputInsideAFileIsRefusedWithTheReason) {
  std::ofstream(folder / "file.png") << "not a folder";
  auto result = run({"compress", "--model", absent_model, folder / "a/x.png", "-o", folder / "file.png/x.pxae"});
  expect_refused(result, "cannot write '" + (folder / "file.png/x.pxae") + "': '" + (folder / "file.png") +
                             "' is a file, not a folder (Not a directory)");
  auto deeper = run({"compress", "--model", absent_model, folder / "a/x.png", "-o", folder / "file.png/sub/x.pxae"});
  expect_refused(deeper, "' is a file, not a folder");
}

TEST_F(PlexusAeCodecOutputs, AnOutputThatIsAFolderIsRefused) {
  fs::create_directories(folder / "a/x.pxae");
  auto result = run({"compress", "--model", absent_model, folder / "a/x.png"});
  expect_refused(result, "cannot write '" + (folder / "a/x.pxae") + "': it is a folder");
}

// A folder the system will not create (nothing can be made in /proc) is
// reported with its reason before the model is loaded, whoever runs it.
TEST_F(PlexusAeCodecOutputs, AFolderThatCannotBeCreatedIsRefusedBeforeTheWork) {
  auto result = run({"compress", "--model", absent_model, folder / "a/x.png", "-o", "/proc/plexus-ae-test/x.pxae"});
  expect_refused(result, "/proc");
  EXPECT_TRUE(contains(result.err, "cannot ")) << result.err;
  EXPECT_FALSE(fs::exists("/proc/plexus-ae-test"));
}

// Root may write anywhere (access(2) says yes), so under root the command
// runs as the unprivileged user nobody (util-linux's setpriv), who sees the
// refusal a user would.
TEST_F(PlexusAeCodecOutputs, AReadOnlyFolderIsRefusedWithTheReason) {
  fs::create_directories(folder / "read-only");
  fs::permissions(folder / "read-only", fs::perms::owner_read | fs::perms::owner_exec | fs::perms::group_read |
                                            fs::perms::group_exec | fs::perms::others_read | fs::perms::others_exec);
  const auto as_nobody = [&](std::vector<std::string> args) {
    args.insert(args.begin(), {"--reuid=65534", "--regid=65534", "--clear-groups", PLEXUS_AE_EXECUTABLE});
    return testing::Process("/usr/bin/setpriv", args, folder.path()).wait();
  };
  const auto as_user = [&](std::vector<std::string> args) {
    if (::geteuid() != 0) return run(args);
    args.insert(args.end(), {"--device", "cpu"});
    return as_nobody(args);
  };
  if (::geteuid() == 0 && (!fs::exists("/usr/bin/setpriv") || as_nobody({"--help"}).exit_code != 0))
    GTEST_SKIP() << "running as root, and the user nobody cannot run " << PLEXUS_AE_EXECUTABLE
                 << " through /usr/bin/setpriv (a folder above it closed to others?)";
  auto result = as_user({"compress", "--model", absent_model, folder / "a/x.png", "-o", folder / "read-only/x.pxae"});
  auto nested = as_user({"compress", "--model", absent_model, folder / "a/x.png", "-o", folder / "read-only/new/"});
  fs::permissions(folder / "read-only", fs::perms::owner_all);
  expect_refused(result, "cannot write '" + (folder / "read-only/x.pxae") + "': its folder '" + (folder / "read-only") +
                             "': Permission denied");
  expect_refused(nested, "Permission denied");
}

TEST_F(PlexusAeCodecOutputs, AFolderAsInputSaysHowToGiveItsFiles) {
  auto result = run({"compress", "--model", absent_model, folder / "a/"});
  expect_refused(
      result, "'" + (folder / "a") + "' is a folder; to compress the images in it, give them: " + (folder / "a/*.png"));
  auto decompress = run({"decompress", "--model", absent_model, folder / "a"});
  expect_refused(decompress, "'" + (folder / "a") +
                                 "' is a folder; to decompress the files in it, give them: " + (folder / "a/*.pxae"));
}

// With a model: what the default names and created folders are.
class PlexusAeCodecOutputsTrained : public PlexusAeCodecOutputs {
 protected:
  void SetUp() override {
    PlexusAeCodecOutputs::SetUp();
    auto trained = testing::run_plexus_ae(testing::tiny_train_args(folder / "a", folder / "run", 4), folder.path());
    ASSERT_EQ(trained.exit_code, 0) << trained.describe();
    model = folder / "run/model.safetensors";
  }
  std::string model;
};

TEST_F(PlexusAeCodecOutputsTrained, DecompressByDefaultNeverNamesTheOriginal) {
  testing::save_png(folder / "photo.png", testing::position_image(20, 12));
  const std::string original = read_all(folder / "photo.png");
  ASSERT_EQ(run({"compress", "--model", model, folder / "photo.png"}).exit_code, 0);
  ASSERT_TRUE(fs::exists(folder / "photo.pxae"));

  auto decoded = run({"decompress", "--model", model, folder / "photo.pxae"});
  ASSERT_EQ(decoded.exit_code, 0) << decoded.describe();
  EXPECT_TRUE(contains(decoded.out, "-> " + (folder / "photo.decoded.png"))) << decoded.out;
  EXPECT_EQ(data::read_image(folder / "photo.decoded.png").width, 20);
  EXPECT_EQ(read_all(folder / "photo.png"), original);

  // Again: the default output exists; the message says which and how to
  // choose another, and does not offer to replace it.
  auto again = run({"decompress", "--model", model, folder / "photo.pxae"});
  EXPECT_EQ(again.exit_code, 1) << again.describe();
  EXPECT_TRUE(contains(again.err, "'" + (folder / "photo.decoded.png") + "', the default output of '" +
                                      (folder / "photo.pxae") + "', already exists; choose where to write it with -o"))
      << again.err;
  EXPECT_FALSE(contains(again.err, "--overwrite")) << again.err;
  EXPECT_EQ(read_all(folder / "photo.png"), original);
}

TEST_F(PlexusAeCodecOutputsTrained, MissingFoldersAreCreatedForAFileAndForAFolder) {
  auto file = run({"compress", "--model", model, folder / "a/x.png", "-o", folder / "new/deeper/x.pxae"});
  ASSERT_EQ(file.exit_code, 0) << file.describe();
  EXPECT_TRUE(fs::is_regular_file(folder / "new/deeper/x.pxae"));
  auto decoded = run({"decompress", "--model", model, folder / "new/deeper/x.pxae", "-o", folder / "png/x.png"});
  ASSERT_EQ(decoded.exit_code, 0) << decoded.describe();
  EXPECT_TRUE(fs::is_regular_file(folder / "png/x.png"));
  auto into_folder = run({"compress", "--model", model, folder / "a/x.png", "-o", folder / "made/here/"});
  ASSERT_EQ(into_folder.exit_code, 0) << into_folder.describe();
  EXPECT_TRUE(fs::is_regular_file(folder / "made/here/x.pxae"));
}

}  // namespace
}  // namespace plexus

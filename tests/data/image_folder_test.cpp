// ImageFolder and image IO: scanning, corrupt and missing inputs, PNG round
// trips, tensor conversion, padding, cropping and PSNR.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "data/data_test_support.h"
#include "plexus/data/image_folder.h"

namespace plexus {
namespace {

using data::Image;
using data::ImageFolder;
using testing::ScratchFolder;

const std::string kSampleJpegFolder = std::string(PLEXUS_SOURCE_DIR) + "/data/train-sample";

std::string first_sample_jpeg() {
  for (const auto& entry : std::filesystem::directory_iterator(kSampleJpegFolder))
    if (entry.path().extension() == ".jpg") return entry.path().string();
  return "";
}

void expect_io_error_containing(const std::function<void()>& action, const std::string& fragment) {
  try {
    action();
    FAIL() << "expected an IoError containing \"" << fragment << "\"";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(ImageIo, PngRoundTripIsExact) {
  ScratchFolder folder("png");
  Image image = testing::position_image(37, 11);
  data::write_png(folder / "a.png", image);
  Image back = data::read_image(folder / "a.png");
  EXPECT_EQ(back.width, 37);
  EXPECT_EQ(back.height, 11);
  EXPECT_EQ(back.pixels, image.pixels);
}

TEST(ImageIo, ReadsSampleJpegAsRgb) {
  std::string jpeg = first_sample_jpeg();
  ASSERT_FALSE(jpeg.empty()) << "no .jpg in " << kSampleJpegFolder;
  Image image = data::read_image(jpeg);
  EXPECT_GT(image.width, 100);
  EXPECT_GT(image.height, 100);
  EXPECT_EQ(image.pixels.size(), static_cast<std::size_t>(image.width) * image.height * 3);
}

TEST(ImageIo, UnreadableFileNamesTheFile) {
  ScratchFolder folder("bad");
  testing::write_bytes(folder / "noise.png", "this is not a PNG");
  expect_io_error_containing([&] { data::read_image(folder / "noise.png"); }, "noise.png");
  expect_io_error_containing([&] { data::read_image(folder / "absent.png"); }, "absent.png");
}

TEST(ImageIo, WritePngIntoMissingFolderNamesThePath) {
  ScratchFolder folder("nowrite");
  expect_io_error_containing([&] { data::write_png(folder / "no/such/dir/x.png", Image(2, 2)); }, "no/such/dir/x.png");
}

TEST(ImageIo, TensorConversionScalesAndRounds) {
  Image image = testing::position_image(4, 3);
  Tensor tensor = data::image_to_tensor(image);
  ASSERT_EQ(tensor.shape(), (Shape{1, 3, 3, 4}));
  // Channel 1 (G) holds y; pixel (y=2, x=3) is at 1*12 + 2*4 + 3.
  EXPECT_FLOAT_EQ(tensor.data<float>()[12 + 2 * 4 + 3], 2.0f / 255.0f);
  EXPECT_EQ(data::tensor_to_image(tensor).pixels, image.pixels);

  // Out-of-range values clamp; halves round to nearest.
  Tensor values = Tensor::from_values({-0.5, 1.5, 0.5, std::nan(""), 10.0 / 255.0, 0.2}, {1, 3, 1, 2});
  Image clamped = data::tensor_to_image(values);
  // Pixel 0 reads channels (values[0], values[2], values[4]); pixel 1 (values[1], values[3], values[5]).
  EXPECT_EQ(clamped.pixels, (std::vector<std::uint8_t>{0, 128, 10, 255, 0, 51}));
}

TEST(ImageIo, PadReplicateAndCropBack) {
  Image image = testing::position_image(3, 2);
  Image padded = data::pad_replicate(image, 5, 4);
  ASSERT_EQ(padded.width, 5);
  ASSERT_EQ(padded.height, 4);
  EXPECT_EQ(padded.at(3, 4, 0), 2);  // x clamps to the last column
  EXPECT_EQ(padded.at(3, 4, 1), 1);  // y clamps to the last row
  EXPECT_EQ(padded.at(0, 1, 0), 1);
  EXPECT_EQ(data::crop_top_left(padded, 3, 2).pixels, image.pixels);
}

TEST(ImageIo, PsnrMatchesHandComputation) {
  Image a(2, 1), b(2, 1);
  b.pixels = {10, 0, 0, 0, 0, 0};  // one channel of one pixel off by 10: MSE = 100 / 6
  EXPECT_NEAR(data::psnr(a, b), 10.0 * std::log10(255.0 * 255.0 * 6.0 / 100.0), 1e-12);
  EXPECT_TRUE(std::isinf(data::psnr(a, a)));
}

TEST(ImageFolder, MissingFolderIsIoErrorNamingIt) {
  expect_io_error_containing([] { ImageFolder("/nonexistent/plexus-images"); },
                             "image folder '/nonexistent/plexus-images' does not exist");
}

TEST(ImageFolder, FileInsteadOfFolderIsIoError) {
  ScratchFolder folder("file");
  data::write_png(folder / "one.png", Image(2, 2));
  expect_io_error_containing([&] { ImageFolder(folder / "one.png"); }, "is not a folder");
}

TEST(ImageFolder, FolderWithoutImagesIsIoErrorNamingIt) {
  ScratchFolder folder("empty");
  testing::write_bytes(folder / "notes.txt", "no images here");
  expect_io_error_containing([&] { ImageFolder{folder.path()}; },
                             "image folder '" + folder.path() + "' holds no PNG or JPEG images");
}

TEST(ImageFolder, ScansRecursivelyWithCaseInsensitiveExtensionsInSortedOrder) {
  ScratchFolder folder("scan");
  data::write_png(folder / "b.PNG", testing::position_image(5, 4));
  std::filesystem::create_directories(folder / "sub/deeper");
  data::write_png(folder / "sub/deeper/a.png", testing::position_image(6, 7));
  std::filesystem::copy_file(first_sample_jpeg(), folder / "sub/c.JpEg");
  testing::write_bytes(folder / "readme.txt", "ignored");
  ImageFolder images(folder.path());
  ASSERT_EQ(images.size(), 3u);
  EXPECT_EQ(images.relative_path(0), "b.PNG");
  EXPECT_EQ(images.relative_path(1), "sub/c.JpEg");
  EXPECT_EQ(images.relative_path(2), "sub/deeper/a.png");
  EXPECT_EQ(images.size_of(2).width, 6);
  EXPECT_EQ(images.size_of(2).height, 7);
  EXPECT_EQ(images.load(2)->pixels, testing::position_image(6, 7).pixels);
  EXPECT_EQ(images.skipped_count(), 0u);
}

TEST(ImageFolder, CorruptFileIsSkippedCountedAndNamedInAWarning) {
  ScratchFolder folder("corrupt");
  data::write_png(folder / "good.png", testing::position_image(8, 8));
  testing::write_bytes(folder / "broken.png", "\x89PNG garbage that is not an image");
  testing::LogCapture log;
  ImageFolder images(folder.path());
  EXPECT_EQ(images.size(), 1u);
  ASSERT_EQ(images.skipped_count(), 1u);
  EXPECT_EQ(images.skipped()[0], folder / "broken.png");
  EXPECT_NE(log.text().find("skipping image '" + (folder / "broken.png") + "'"), std::string::npos) << log.text();
}

TEST(ImageFolder, TruncatedFileIsSkippedWhenDecodedAndReplacedByTheNextImage) {
  ScratchFolder folder("truncated");
  data::write_png(folder / "a.png", testing::position_image(64, 64));
  data::write_png(folder / "b.png", testing::position_image(9, 9));
  std::string bytes = testing::read_bytes(folder / "a.png");
  testing::write_bytes(folder / "a.png", bytes.substr(0, bytes.size() / 2));  // header intact, data cut
  testing::LogCapture log;
  ImageFolder images(folder.path());
  ASSERT_EQ(images.size(), 2u);  // the header still reads
  EXPECT_EQ(images.load(0), nullptr);
  EXPECT_EQ(images.load(0), nullptr);  // counted and warned once only
  std::size_t used = 99;
  auto image = images.load_usable(0, &used);
  EXPECT_EQ(used, 1u);
  EXPECT_EQ(image->width, 9);
  ASSERT_EQ(images.skipped_count(), 1u);
  EXPECT_EQ(images.skipped()[0], folder / "a.png");
  const std::string text = log.text();
  const auto first = text.find(folder / "a.png");
  ASSERT_NE(first, std::string::npos) << text;
  EXPECT_EQ(text.find(folder / "a.png", first + 1), std::string::npos) << "warned twice:\n" << text;
}

TEST(ImageFolder, FolderOfOnlyCorruptFilesIsIoError) {
  ScratchFolder folder("allbad");
  testing::write_bytes(folder / "x.jpg", "not a jpeg");
  testing::write_bytes(folder / "y.png", "not a png");
  testing::LogCapture log;
  expect_io_error_containing([&] { ImageFolder{folder.path()}; }, "holds no usable images: all 2");
}

TEST(ImageFolder, UndecodableEverywhereIsIoErrorOnLoad) {
  ScratchFolder folder("alltruncated");
  data::write_png(folder / "a.png", testing::position_image(64, 64));
  std::string bytes = testing::read_bytes(folder / "a.png");
  testing::write_bytes(folder / "a.png", bytes.substr(0, bytes.size() / 2));
  testing::LogCapture log;
  ImageFolder images(folder.path());
  expect_io_error_containing([&] { images.load_usable(0); }, "none of its 1 PNG/JPEG file(s) could be decoded");
}

TEST(ImageFolder, CacheBudgetOfZeroStillLoads) {
  ScratchFolder folder("nocache");
  data::write_png(folder / "a.png", testing::position_image(5, 5));
  ImageFolder images(folder.path(), /*cache_bytes=*/0);
  auto first = images.load(0);
  auto second = images.load(0);
  EXPECT_NE(first.get(), second.get());  // decoded twice: nothing cached
  EXPECT_EQ(first->pixels, second->pixels);
}

}  // namespace
}  // namespace plexus

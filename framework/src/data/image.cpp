#include "plexus/data/image.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "plexus/error.h"

namespace plexus::data {

Image::Image(int width_, int height_) : width(width_), height(height_) {
  if (width < 0 || height < 0)
    throw ShapeError("an image cannot be " + std::to_string(width) + "x" + std::to_string(height));
  pixels.assign(static_cast<std::size_t>(width) * height * 3, 0);
}

Tensor image_to_tensor(const Image& image) {
  Tensor tensor({1, 3, image.height, image.width});
  float* out = tensor.data<float>();
  const std::size_t plane = static_cast<std::size_t>(image.height) * image.width;
  for (std::size_t pixel = 0; pixel < plane; ++pixel)
    for (int c = 0; c < 3; ++c) out[c * plane + pixel] = image.pixels[pixel * 3 + c] / 255.0f;
  return tensor;
}

Image tensor_to_image(const Tensor& batch, std::int64_t index) {
  if (batch.ndim() != 4 || batch.dim(1) != 3)
    throw ShapeError("an image tensor must be [N, 3, H, W], got " + batch.describe());
  if (index < 0 || index >= batch.dim(0))
    throw ShapeError("image " + std::to_string(index) + " requested from " + batch.describe());
  Tensor host = batch.to(Device::cpu()).to(DType::f32);
  const int height = static_cast<int>(batch.dim(2));
  const int width = static_cast<int>(batch.dim(3));
  Image image(width, height);
  const std::size_t plane = static_cast<std::size_t>(height) * width;
  const float* in = host.data<float>() + index * 3 * plane;
  for (std::size_t pixel = 0; pixel < plane; ++pixel)
    for (int c = 0; c < 3; ++c) {
      float v = in[c * plane + pixel];
      v = std::isnan(v) ? 0.0f : std::min(1.0f, std::max(0.0f, v));
      image.pixels[pixel * 3 + c] = static_cast<std::uint8_t>(std::lround(v * 255.0f));
    }
  return image;
}

Image pad_replicate(const Image& image, int width, int height) {
  if (image.width < 1 || image.height < 1) throw ShapeError("cannot pad an empty image");
  width = std::max(width, image.width);
  height = std::max(height, image.height);
  Image padded(width, height);
  for (int y = 0; y < height; ++y) {
    const int sy = std::min(y, image.height - 1);
    for (int x = 0; x < width; ++x) {
      const int sx = std::min(x, image.width - 1);
      for (int c = 0; c < 3; ++c) padded.at(y, x, c) = image.at(sy, sx, c);
    }
  }
  return padded;
}

Image crop_top_left(const Image& image, int width, int height) {
  if (width > image.width || height > image.height || width < 0 || height < 0)
    throw ShapeError("cannot crop " + std::to_string(width) + "x" + std::to_string(height) + " from a " +
                     std::to_string(image.width) + "x" + std::to_string(image.height) + " image");
  Image cropped(width, height);
  for (int y = 0; y < height; ++y)
    std::copy_n(&image.pixels[static_cast<std::size_t>(y) * image.width * 3], static_cast<std::size_t>(width) * 3,
                &cropped.pixels[static_cast<std::size_t>(y) * width * 3]);
  return cropped;
}

double psnr(const Image& reference, const Image& other) {
  if (reference.width != other.width || reference.height != other.height)
    throw ShapeError("PSNR needs images of equal size, got " + std::to_string(reference.width) + "x" +
                     std::to_string(reference.height) + " and " + std::to_string(other.width) + "x" +
                     std::to_string(other.height));
  if (reference.pixels.empty()) throw ShapeError("PSNR of an empty image");
  double sum = 0.0;
  for (std::size_t i = 0; i < reference.pixels.size(); ++i) {
    const double d = static_cast<double>(reference.pixels[i]) - other.pixels[i];
    sum += d * d;
  }
  const double mse = sum / static_cast<double>(reference.pixels.size());
  if (mse == 0.0) return std::numeric_limits<double>::infinity();
  return 10.0 * std::log10(255.0 * 255.0 / mse);
}

}  // namespace plexus::data

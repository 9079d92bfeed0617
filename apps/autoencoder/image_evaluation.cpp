#include "image_evaluation.h"

#include <cmath>

#include "plexus/builtin_layers.h"
#include "plexus/codec/autoencoder_contract.h"
#include "plexus/error.h"

namespace plexus::ae {

double ms_ssim_of_images(const data::Image& a, const data::Image& b) {
  if (a.width != b.width || a.height != b.height)
    throw ShapeError("MS-SSIM of images of different sizes: " + std::to_string(a.width) + "x" +
                     std::to_string(a.height) + " and " + std::to_string(b.width) + "x" + std::to_string(b.height));
  if (a.width < codec::kMsSsimMinSide || a.height < codec::kMsSsimMinSide) return std::nan("");
  static const Registry registry = builtin_registry();
  const std::unique_ptr<Layer> layer = registry.create("MSSSIM", codec::kMsSsim, nlohmann::json::object());
  const Shape shape{1, 3, a.height, a.width};
  const auto f64 = [&](const data::Image& image) {
    return Tensor::from_values(data::image_to_tensor(image).to_values(), shape, DType::f64);
  };
  const Tensor x = f64(a), y = f64(b);
  Tensor value(Shape{}, DType::f64);
  Context ctx;
  layer->forward(ctx, {&x, &y}, {&value});
  return value.to_values().at(0);
}

ImageEvaluation evaluate_image(Net& net, Context& ctx, const data::Image& image, int stride, double level) {
  const int padded_width = (image.width + stride - 1) / stride * stride;
  const int padded_height = (image.height + stride - 1) / stride * stride;
  const data::Image padded = data::pad_replicate(image, padded_width, padded_height);
  net.reshape(codec::model_input_shapes(net.spec(), Shape{1, 3, padded_height, padded_width}));
  net.input(codec::kImage).copy_from(data::image_to_tensor(padded));
  codec::set_rate_level(ctx, net, level);
  const bool was_training = ctx.training();
  ctx.set_training(false);
  net.forward(ctx);
  ctx.set_training(was_training);

  ImageEvaluation result;
  const double padded_pixels = static_cast<double>(padded_width) * padded_height;
  const double pixels = static_cast<double>(image.width) * image.height;
  result.bpp = net.scalar(codec::kRate) * padded_pixels / pixels;
  result.reconstruction =
      data::crop_top_left(data::tensor_to_image(net.blob(codec::kReconstruction)), image.width, image.height);
  result.psnr = data::psnr(image, result.reconstruction);
  result.ms_ssim = ms_ssim_of_images(result.reconstruction, image);
  result.mse = std::pow(10.0, -result.psnr / 10.0);
  return result;
}

}  // namespace plexus::ae

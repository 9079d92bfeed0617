#include "image_evaluation.h"

#include <cmath>

#include "plexus/codec/autoencoder_contract.h"

namespace plexus::ae {

ImageEvaluation evaluate_image(Net& net, Context& ctx, const data::Image& image, int stride, double level) {
  const int padded_width = (image.width + stride - 1) / stride * stride;
  const int padded_height = (image.height + stride - 1) / stride * stride;
  const data::Image padded = data::pad_replicate(image, padded_width, padded_height);
  net.reshape(model_input_shapes(net.spec(), Shape{1, 3, padded_height, padded_width}));
  net.input(kImage).copy_from(data::image_to_tensor(padded));
  set_rate_level(ctx, net, level);
  const bool was_training = ctx.training();
  ctx.set_training(false);
  net.forward(ctx);
  ctx.set_training(was_training);

  ImageEvaluation result;
  const double padded_pixels = static_cast<double>(padded_width) * padded_height;
  const double pixels = static_cast<double>(image.width) * image.height;
  result.bpp = net.scalar(kRate) * padded_pixels / pixels;
  result.reconstruction =
      data::crop_top_left(data::tensor_to_image(net.blob(kReconstruction)), image.width, image.height);
  result.psnr = data::psnr(image, result.reconstruction);
  result.mse = std::pow(10.0, -result.psnr / 10.0);
  return result;
}

}  // namespace plexus::ae

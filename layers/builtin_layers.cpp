// Explicit registration of every built-in layer, through the same
// Registry::add() a plugin uses. One line per layer; no static initialisers,
// so nothing silently disappears when the linker prunes a library.
#include "plexus/builtin_layers.h"

#include "add/add.h"
#include "concat_split/concat_split.h"
#include "conv2d/conv2d.h"
#include "conv_transpose2d/conv_transpose2d.h"
#include "elementwise/elementwise.h"
#include "factorized_entropy_model/factorized_entropy_model.h"
#include "ms_ssim/ms_ssim.h"
#include "mse_loss/mse_loss.h"
#include "fully_connected/fully_connected.h"
#include "gain_unit/gain_unit.h"
#include "gaussian_conditional/gaussian_conditional.h"
#include "rate_loss/rate_loss.h"
#include "gdn/gdn.h"
#include "normalization/normalization.h"
#include "pixel_shuffle/pixel_shuffle.h"
#include "quantize_around_mean/quantize_around_mean.h"
#include "uniform_noise/uniform_noise.h"
#include "softmax_projection/softmax_projection.h"
#include "softmax/softmax.h"
#include "matmul/matmul.h"
#include "window/window.h"
#include "avg_pool2d/avg_pool2d.h"
#include "checkerboard_mask/checkerboard_mask.h"

namespace plexus {

void register_builtin_layers(Registry& registry) {
  layers::register_conv2d(registry);
  layers::register_conv_transpose2d(registry);
  layers::register_gdn(registry);
  layers::register_elementwise(registry);  // ReLU, LeakyReLU, Abs, Sigmoid, Tanh, GELU, Mul
  layers::register_uniform_noise(registry);
  layers::register_factorized_entropy_model(registry);
  layers::register_gaussian_conditional(registry);
  layers::register_quantize_around_mean(registry);
  layers::register_mse_loss(registry);
  layers::register_ms_ssim(registry);
  layers::register_rate_loss(registry);
  layers::register_fully_connected(registry);
  layers::register_softmax_projection(registry);
  layers::register_add(registry);
  layers::register_concat_split(registry);
  layers::register_pixel_shuffle(registry);
  layers::register_gain_unit(registry);
  layers::register_softmax(registry);
  layers::register_matmul(registry);
  layers::register_normalization(registry);
  layers::register_window(registry);  // WindowPartition, WindowReverse
  layers::register_avg_pool2d(registry);
  layers::register_checkerboard_mask(registry);
}

Registry builtin_registry() {
  Registry registry;
  register_builtin_layers(registry);
  return registry;
}

}  // namespace plexus

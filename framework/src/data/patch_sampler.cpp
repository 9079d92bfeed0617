#include "plexus/data/patch_sampler.h"

#include <random>

#include "plexus/error.h"

namespace plexus::data {

namespace {
// SplitMix64's finaliser (Steele, Lea & Flood 2014): a bijection on 64-bit
// words whose outputs for consecutive inputs look independent.
std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
}  // namespace

std::uint64_t mix_seed(std::uint64_t seed, std::uint64_t step, std::uint64_t stream) {
  return splitmix64(splitmix64(splitmix64(seed) ^ step) ^ stream);
}

int patch_origin(std::uint64_t draw, int length, int patch) {
  if (length <= patch) return 0;
  return static_cast<int>(draw % static_cast<std::uint64_t>(length - patch + 1));
}

int reflect_index(std::int64_t i, int length) {
  const std::int64_t period = 2 * static_cast<std::int64_t>(length);
  const std::int64_t m = i % period;
  return static_cast<int>(m < length ? m : period - 1 - m);
}

// The source row of each output row and the source column of each output
// column are worked out once per crop (the reflection's % is not per pixel),
// then each output row is a gather from one image row.
void extract_patch(const Image& image, const PatchPlan& plan, int patch, std::uint8_t* chw) {
  const int x0 = patch_origin(plan.x_draw, image.width, patch);
  const int y0 = patch_origin(plan.y_draw, image.height, patch);
  std::vector<std::size_t> column_offset(static_cast<std::size_t>(patch));  // bytes into a source row
  for (int x = 0; x < patch; ++x)
    column_offset[x] =
        3 * static_cast<std::size_t>(reflect_index(x0 + (plan.flip_horizontal ? patch - 1 - x : x), image.width));
  const std::size_t plane = static_cast<std::size_t>(patch) * patch;
  std::uint8_t* red = chw;
  std::uint8_t* green = chw + plane;
  std::uint8_t* blue = chw + 2 * plane;
  for (int y = 0; y < patch; ++y) {
    const int sy = reflect_index(y0 + (plan.flip_vertical ? patch - 1 - y : y), image.height);
    const std::uint8_t* row = image.pixels.data() + static_cast<std::size_t>(sy) * image.width * 3;
    const std::size_t out = static_cast<std::size_t>(y) * patch;
    for (int x = 0; x < patch; ++x) {
      const std::uint8_t* pixel = row + column_offset[x];
      red[out + x] = pixel[0];
      green[out + x] = pixel[1];
      blue[out + x] = pixel[2];
    }
  }
}

void bytes_to_unit(const std::uint8_t* bytes, float* values, std::size_t count) {
  for (std::size_t i = 0; i < count; ++i) values[i] = static_cast<float>(bytes[i]) / 255.0f;
}

PatchSampler::PatchSampler(std::uint64_t seed, int batch, int patch, Shard shard)
    : seed_(seed), batch_(batch), patch_(patch), shard_(shard) {
  if (batch < 1) throw ConfigError("the batch size must be >= 1, got " + std::to_string(batch));
  if (patch < 1) throw ConfigError("the patch size must be >= 1, got " + std::to_string(patch));
  if (shard.world_size < 1 || shard.rank < 0 || shard.rank >= shard.world_size)
    throw ConfigError("the sampler's rank " + std::to_string(shard.rank) + " is not in [0, world size " +
                      std::to_string(shard.world_size) + ")");
}

std::vector<PatchPlan> PatchSampler::plan(std::int64_t step, std::size_t image_count) const {
  if (image_count == 0) throw ConfigError("cannot sample patches from no images");
  // mt19937_64 is specified bit for bit by the standard and the draws are
  // reduced with %, not a distribution, so plans agree across compilers.
  std::mt19937_64 rng(mix_seed(seed_, static_cast<std::uint64_t>(step)));
  // The whole global batch is drawn (four draws per crop are cheap), and
  // this rank keeps its slice.
  const std::size_t global = static_cast<std::size_t>(batch_) * static_cast<std::size_t>(shard_.world_size);
  std::vector<PatchPlan> plans(global);
  for (auto& p : plans) {
    p.image = static_cast<std::size_t>(rng() % image_count);
    p.x_draw = rng();
    p.y_draw = rng();
    const std::uint64_t flips = rng();
    p.flip_horizontal = (flips & 1u) != 0;
    p.flip_vertical = (flips & 2u) != 0;
  }
  const auto first = plans.begin() + static_cast<std::ptrdiff_t>(batch_) * shard_.rank;
  return std::vector<PatchPlan>(first, first + batch_);
}

std::size_t PatchSampler::batch_elements() const { return static_cast<std::size_t>(batch_) * 3 * patch_ * patch_; }

void PatchSampler::fill_batch(ImageFolder& images, std::int64_t step, std::uint8_t* bytes) const {
  const std::size_t item = static_cast<std::size_t>(3) * patch_ * patch_;
  std::size_t k = 0;
  for (const PatchPlan& plan : plan(step, images.size())) {
    auto image = images.load_usable(plan.image);
    extract_patch(*image, plan, patch_, bytes + item * k++);
  }
}

Tensor PatchSampler::make_batch(ImageFolder& images, std::int64_t step) const {
  std::vector<std::uint8_t> bytes(batch_elements());
  fill_batch(images, step, bytes.data());
  Tensor batch({batch_, 3, patch_, patch_});
  bytes_to_unit(bytes.data(), batch.data<float>(), bytes.size());
  return batch;
}

}  // namespace plexus::data

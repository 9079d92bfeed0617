#pragma once
// PatchSampler: the training batches. Batch `step` is a pure function of
// (seed, step): which images, where each crop lies and whether it is
// flipped are drawn from a generator seeded with mix_seed(seed, step, ...),
// so a run resumed at step k sees exactly the batches an uninterrupted run
// sees, whatever threads produced them.
//
// Images smaller than the patch are extended by mirror reflection (the
// image, then its mirror image, and so on). Reflection keeps the pixels at
// their native scale and noise level, which is what the codec will see at
// test time; upscaling would hand the model blurred, resampled content
// whose statistics differ from real photographs.
#include <cstdint>
#include <vector>

#include "plexus/data/image.h"
#include "plexus/data/image_folder.h"
#include "plexus/tensor.h"

namespace plexus::data {

// A well-mixed 64-bit seed for (seed, step, stream), by SplitMix64 rounds,
// so neighbouring steps and streams get unrelated generators.
std::uint64_t mix_seed(std::uint64_t seed, std::uint64_t step, std::uint64_t stream = 0);

// One crop: which image, raw random draws for its origin (reduced modulo
// the free range once the image's size is known), and its flips.
struct PatchPlan {
  std::size_t image = 0;
  std::uint64_t x_draw = 0;
  std::uint64_t y_draw = 0;
  bool flip_horizontal = false;
  bool flip_vertical = false;
};

// The top-left corner of a patch of `patch` pixels inside a side of
// `length` pixels: draw % (length - patch + 1), or 0 when the side is
// shorter than the patch (the crop then runs into the reflection).
int patch_origin(std::uint64_t draw, int length, int patch);
// Index into [0, length) of position `i` (>= 0) of the mirror-periodic
// extension x0 x1 .. x(n-1) x(n-1) .. x0 x0 x1 ...
int reflect_index(std::int64_t i, int length);

// Writes the [3, patch, patch] crop described by `plan` into `chw` as the
// image's 8-bit values (channel-major), flipping as planned.
void extract_patch(const Image& image, const PatchPlan& plan, int patch, std::uint8_t* chw);
// values[i] = bytes[i] / 255 (in f32, correctly rounded: the CUDA input path
// computes the same on the device, so both give identical batches).
void bytes_to_unit(const std::uint8_t* bytes, float* values, std::size_t count);

// One rank's share of each global batch in data-parallel training: of the
// world_size * batch crops drawn for a step, exactly as one sampler with
// batch world_size * batch draws them, rank r takes crops
// [r * batch, (r + 1) * batch). So N ranks with batch B see the images of one
// run with batch N * B, split without overlap.
struct Shard {
  int rank = 0;
  int world_size = 1;
};

class PatchSampler {
 public:
  // `batch` is this rank's share. Throws ConfigError for batch < 1,
  // patch < 1, or a shard whose rank is not in [0, world_size).
  PatchSampler(std::uint64_t seed, int batch, int patch, Shard shard = {});

  int batch() const { return batch_; }
  int patch() const { return patch_; }
  const Shard& shard() const { return shard_; }
  // batch x 3 x patch x patch: the elements (and bytes) of this rank's batch.
  std::size_t batch_elements() const;
  // This rank's crops of batch `step` over a folder of `image_count` images.
  std::vector<PatchPlan> plan(std::int64_t step, std::size_t image_count) const;
  // Batch `step` as 8-bit values, [batch, 3, patch, patch], into `bytes`
  // (batch_elements() long): a quarter of the f32 batch's memory traffic.
  void fill_batch(ImageFolder& images, std::int64_t step, std::uint8_t* bytes) const;
  // Batch `step`: [batch, 3, patch, patch] f32 on the CPU, values v / 255.
  Tensor make_batch(ImageFolder& images, std::int64_t step) const;

 private:
  std::uint64_t seed_;
  int batch_;
  int patch_;
  Shard shard_;
};

}  // namespace plexus::data

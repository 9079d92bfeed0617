#pragma once
// Copies of channel slabs between tensors laid out [N, C, ...]: what Concat
// and Split do forward, and each other's backward. In NCHW a channel slice
// of a batch of more than one item is not contiguous, so a part is no view
// of the whole: it is copied, on CUDA every part of a join or a split in
// one launch.
#include <cstdint>
#include <vector>

#include "plexus/context.h"
#include "plexus/tensor.h"

namespace plexus::layers {

// Channels of a shape of rank >= 2 (dimension 1) and the elements per channel
// per batch item (the product of the dimensions after 1).
std::int64_t channels_of(const Shape& shape);
std::int64_t elements_per_channel(const Shape& shape);

// whole[:, o_k : o_k + C_k] = parts[k] for every k, with o_k the sum of the
// earlier parts' channels (C_k).
void join_channels(Context& ctx, const std::vector<const Tensor*>& parts, Tensor& whole);
// parts[k] = whole[:, o_k : o_k + sizes[k]], o_k the sum of the earlier
// sizes; a null part is skipped (its channels still count in the offsets).
void split_channels(Context& ctx, const Tensor& whole, const std::vector<Tensor*>& parts,
                    const std::vector<std::int64_t>& sizes);

#if PLEXUS_WITH_CUDA
// Which way a copy between the whole and its parts goes.
enum class ChannelCopy { join, split };
// join_channels (the parts read, the whole written) or split_channels (the
// whole read, the non-null parts written) on the context's stream: one
// launch for up to kPartsPerLaunch parts (channel_blocks.cu).
void copy_channel_parts_cuda(Context& ctx, const Tensor& whole, const std::vector<const Tensor*>& parts,
                             const std::vector<std::int64_t>& sizes, ChannelCopy direction);
#endif

}  // namespace plexus::layers

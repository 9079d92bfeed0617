#pragma once
// Copies of channel slabs between tensors laid out [N, C, ...]: what Concat
// and Split do forward, and each other's backward.
#include <cstdint>
#include <vector>

#include "plexus/context.h"
#include "plexus/tensor.h"

namespace plexus::layers {

// Channels of a shape of rank >= 2 (dimension 1) and the elements per channel
// per batch item (the product of the dimensions after 1).
std::int64_t channels_of(const Shape& shape);
std::int64_t elements_per_channel(const Shape& shape);

// A slab: `channels` consecutive channels starting at `source_offset` in the
// source and at `destination_offset` in the destination. Both tensors share
// dimension 0 and every dimension after 1.
struct ChannelSlab {
  std::int64_t channels;
  std::int64_t source_offset;
  std::int64_t destination_offset;
};

// destination[n, destination_offset + c, p] = source[n, source_offset + c, p]
// for every n, c < slab.channels and p; on the context's device (and stream).
void copy_channel_slab(Context& ctx, const Tensor& source, Tensor& destination, const ChannelSlab& slab);

// whole[:, o_k : o_k + C_k] = parts[k] for every k, with o_k the sum of the
// earlier parts' channels (C_k).
void join_channels(Context& ctx, const std::vector<const Tensor*>& parts, Tensor& whole);
// parts[k] = whole[:, o_k : o_k + sizes[k]], o_k the sum of the earlier
// sizes; a null part is skipped (its channels still count in the offsets).
void split_channels(Context& ctx, const Tensor& whole, const std::vector<Tensor*>& parts,
                    const std::vector<std::int64_t>& sizes);

#if PLEXUS_WITH_CUDA
void copy_channel_slab_cuda(Context& ctx, const Tensor& source, Tensor& destination, const ChannelSlab& slab);
#endif

}  // namespace plexus::layers

// What the ranks of a data-parallel run must keep alike: their replicas
// (plexus/distributed/replicas.h) and their decisions
// (plexus/distributed/agreement.h).
#include "plexus/distributed/replicas.h"

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "plexus/checksum.h"
#include "plexus/distributed/agreement.h"
#include "plexus/error.h"

namespace plexus::distributed {

namespace {

// A 64-bit value as four 16-bit pieces, each exact in an f32.
std::vector<double> pieces_of(std::uint64_t value) {
  std::vector<double> pieces;
  for (int i = 0; i < 4; ++i) pieces.push_back(static_cast<double>((value >> (16 * i)) & 0xFFFFu));
  return pieces;
}

std::uint64_t value_of(const std::vector<double>& pieces) {
  std::uint64_t value = 0;
  for (int i = 0; i < 4; ++i) value |= static_cast<std::uint64_t>(pieces[i]) << (16 * i);
  return value;
}

std::string hex(std::uint64_t value) {
  char text[20];
  std::snprintf(text, sizeof text, "%016" PRIx64, value);
  return text;
}

}  // namespace

std::uint64_t parameter_fingerprint(const std::vector<NamedParameter>& parameters) {
  plexus::Fnv1a64 hash;
  for (const NamedParameter& named : parameters) {
    hash.add_field(named.name);
    const Tensor host = named.parameter->value.to(Device::cpu());
    const std::uint64_t values = lane_hash64(host.raw_data(), host.nbytes());
    hash.add(&values, sizeof values);
  }
  return hash.value();
}

void broadcast_parameters(Context& ctx, Communicator& communicator, const std::vector<NamedParameter>& parameters) {
  for (const NamedParameter& named : parameters) communicator.broadcast(ctx, named.parameter->value, 0);
  communicator.join(ctx);
}

void check_replicas_agree(Context& ctx, Communicator& communicator, const std::vector<NamedParameter>& parameters,
                          std::int64_t step) {
  communicator.synchronize();  // with its timeout: the context may wait on a reduction of a rank that died
  ctx.synchronize();
  const std::uint64_t mine = parameter_fingerprint(parameters);
  const Device device = parameters.empty() ? ctx.device() : parameters.front().parameter->value.device();
  Tensor reference = Tensor::from_values(pieces_of(mine), {4}, DType::f32, device);
  communicator.broadcast(ctx, reference, 0);
  communicator.synchronize();
  const std::uint64_t rank0 = value_of(reference.to_values());
  std::vector<double> flags(static_cast<std::size_t>(communicator.world_size()), 0.0);
  flags[static_cast<std::size_t>(communicator.rank())] = mine == rank0 ? 0.0 : 1.0;
  Tensor differs = Tensor::from_values(flags, {static_cast<std::int64_t>(flags.size())}, DType::f32, device);
  communicator.all_reduce(ctx, differs, Reduction::sum);
  communicator.synchronize();
  const std::vector<double> all = differs.to_values();
  std::string ranks;
  for (std::size_t r = 0; r < all.size(); ++r)
    if (all[r] != 0) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
  if (ranks.empty()) return;
  throw Error("the replicas diverged: after step " + std::to_string(step) + " the parameters of rank(s) " + ranks +
              " differ from rank 0's (rank 0's fingerprint " + hex(rank0) + ", rank " +
              std::to_string(communicator.rank()) + "'s " + hex(mine) +
              "); data-parallel ranks must stay identical, so the run stops here");
}

std::int64_t agreement_interval(double seconds, double seconds_per_step) {
  if (!(seconds_per_step > 0) || !std::isfinite(seconds_per_step)) return 10;
  const double steps = std::round(seconds / seconds_per_step);
  return static_cast<std::int64_t>(std::clamp(steps, 1.0, static_cast<double>(kMaxAgreementInterval)));
}

// A sum over the ranks of (stop, out_of_time, seconds, next_interval), in
// which only rank 0 contributes the last three.
Agreement agree(Context& ctx, Communicator& communicator, bool stop, bool out_of_time, double seconds,
                std::int64_t next_interval) {
  const bool root = communicator.rank() == 0;
  const auto interval = static_cast<double>(std::clamp<std::int64_t>(next_interval, 1, kMaxAgreementInterval));
  Tensor votes = Tensor::from_values(
      {stop ? 1.0 : 0.0, root && out_of_time ? 1.0 : 0.0, root ? seconds : 0.0, root ? interval : 0.0}, {4}, DType::f32,
      ctx.device());
  communicator.all_reduce(ctx, votes, Reduction::sum);
  communicator.synchronize();
  const std::vector<double> agreed = votes.to_values();
  return {agreed[0] > 0, agreed[1] > 0, agreed[2], static_cast<std::int64_t>(agreed[3])};
}

}  // namespace plexus::distributed

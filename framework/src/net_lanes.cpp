#include "net_lanes.h"

#include <algorithm>
#include <map>
#include <string>

#include "backend.h"

namespace plexus::detail {

namespace {

void add_unique(std::vector<std::size_t>& list, std::size_t value) {
  if (std::find(list.begin(), list.end(), value) == list.end()) list.push_back(value);
}

}  // namespace

LanePlan plan_lanes(const std::vector<const NodeSpec*>& nodes, const std::vector<std::int64_t>& output_elements,
                    int max_lanes) {
  const std::size_t count = nodes.size();
  LanePlan plan;
  plan.lane.assign(count, 0);
  plan.forward_waits.resize(count);
  plan.backward_waits.resize(count);
  std::map<std::string, std::size_t> producer;  // blob -> node; model inputs are absent
  std::vector<std::size_t> last;                // last[l]: the latest node on lane l
  for (std::size_t i = 0; i < count; ++i) {
    int chosen = -1, first_producer_lane = -1;
    for (const auto& input : nodes[i]->inputs) {
      const auto it = producer.find(input);
      if (it == producer.end()) continue;
      const int lane = plan.lane[it->second];
      if (first_producer_lane < 0) first_producer_lane = lane;
      if (chosen < 0 && last[static_cast<std::size_t>(lane)] == it->second) chosen = lane;
    }
    if (chosen < 0) {
      if (static_cast<int>(last.size()) < std::max(max_lanes, 1)) {
        chosen = static_cast<int>(last.size());
        last.push_back(i);
      } else {
        chosen = std::max(first_producer_lane, 0);
      }
    }
    plan.lane[i] = chosen;
    last[static_cast<std::size_t>(chosen)] = i;
    for (const auto& output : nodes[i]->outputs) producer[output] = i;
  }
  plan.lanes = std::max<int>(static_cast<int>(last.size()), 1);
  for (std::size_t i = 0; i < count; ++i)
    for (const auto& input : nodes[i]->inputs) {
      const auto it = producer.find(input);
      if (it == producer.end() || plan.lane[it->second] == plan.lane[i]) continue;
      add_unique(plan.forward_waits[i], it->second);
      add_unique(plan.backward_waits[it->second], i);
    }
  // ancestor[i][j]: node i reads, directly or not, what node j writes.
  std::vector<std::vector<bool>> ancestor(count, std::vector<bool>(count, false));
  for (std::size_t i = 0; i < count; ++i)
    for (const auto& input : nodes[i]->inputs) {
      const auto it = producer.find(input);
      if (it == producer.end()) continue;
      ancestor[i][it->second] = true;
      for (std::size_t j = 0; j < it->second; ++j)
        if (ancestor[it->second][j]) ancestor[i][j] = true;
    }
  const auto beside_another = [&](std::size_t i) {
    for (std::size_t j = 0; j < count; ++j)
      if (j != i && !ancestor[i][j] && !ancestor[j][i]) return true;
    return false;
  };
  std::vector<std::int64_t> size(static_cast<std::size_t>(plan.lanes), 0);
  for (std::size_t i = 0; i < count; ++i) {
    if (beside_another(i)) {
      std::int64_t& lane_size = size[static_cast<std::size_t>(plan.lane[i])];
      lane_size = std::max(lane_size, output_elements[i]);
    }
  }
  const std::int64_t largest = *std::max_element(size.begin(), size.end());
  for (std::int64_t lane_size : size) plan.urgent.push_back(lane_size * 8 <= largest);
  return plan;
}

PassLanes::PassLanes(Context& ctx, const LanePlan& plan, bool one_stream)
    : ctx_(ctx), active_(!one_stream && ctx.cuda_resources() && plan.lanes >= 2), marked_(plan.lane.size(), false) {
  if (!active_) return;
  std::vector<char> urgent(plan.urgent.begin(), plan.urgent.end());
  cuda::lanes_begin(*ctx.cuda_resources(), plan.lanes, static_cast<int>(plan.lane.size()), urgent.data());
}

PassLanes::~PassLanes() {
  // Unwinding: the context's stream must still wait for the lanes (and a
  // capture needs them joined before it ends). The next checked call on
  // the stream reports an error from here.
  try {
    end();
  } catch (...) {
  }
}

void PassLanes::enter(int lane) {
  if (active_) cuda::lane_enter(*ctx_.cuda_resources(), lane);
}

void PassLanes::wait_for(std::size_t k) {
  if (active_) cuda::lane_wait(*ctx_.cuda_resources(), static_cast<int>(k));
}

void PassLanes::mark(std::size_t k) {
  marked_[k] = true;
  if (active_) cuda::lane_mark(*ctx_.cuda_resources(), static_cast<int>(k));
}

void PassLanes::leave() {
  if (active_) cuda::lane_leave(*ctx_.cuda_resources());
}

void PassLanes::end() {
  if (!active_) return;
  active_ = false;
  cuda::lanes_end(*ctx_.cuda_resources());
}

}  // namespace plexus::detail

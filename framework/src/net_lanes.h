#pragma once
// Lanes: on CUDA a Net runs the paths of its graph that do not depend on
// each other side by side, each path on a stream of its own (a lane), so
// that the small kernels of one path (a hyperprior's hyper-analysis and
// hyper-synthesis: tens of launches on 16x16 and smaller maps, each leaving
// most of the GPU idle) overlap the large kernels of another (the synthesis
// transform) instead of waiting for them. Inside a recorded CUDA graph the
// lanes become parallel paths of the graph.
//
// plan_lanes cuts the nodes, in execution order, into chains: a node
// continues the lane whose last node so far produced one of its inputs (the
// first such input), else starts a new lane while fewer than max_lanes
// exist, else joins the lane of its first input's producer (lane 0 for a
// node that reads only model inputs). Whatever the plan, a node waits for
// every node on another lane whose results it reads (forward: the producers
// of its inputs; backward: the readers of its outputs, and whoever added
// into an input's gradient before it), so lanes change which kernels
// overlap, never a value: each kernel reads the same inputs, and kernels
// that add into one buffer run in the same order, as on one stream.
//
// Overlap alone hides little: while the large kernels fill every
// multiprocessor, a small kernel on another stream gets a slot only after
// the large kernel's last blocks are dispatched. So the lanes of small work
// are urgent: their streams have the highest priority, and their blocks
// take the next free slots. A lane's size is the largest output among its
// nodes that can run beside another lane's (a node every other node
// descends from or leads to, such as the analysis transform's, never
// does); a lane is urgent when its size is at most 1/8 of the largest
// lane's.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "plexus/context.h"
#include "plexus/model_spec.h"

namespace plexus::detail {

struct LanePlan {
  int lanes = 1;
  std::vector<bool> urgent;                             // per lane
  std::vector<int> lane;                                // per node, in execution order
  std::vector<std::vector<std::size_t>> forward_waits;  // producers of the node's inputs on other lanes
  std::vector<std::vector<std::size_t>> backward_waits; // readers of the node's outputs on other lanes
};

// output_elements[k]: the elements of node k's largest output.
LanePlan plan_lanes(const std::vector<const NodeSpec*>& nodes, const std::vector<std::int64_t>& output_elements,
                    int max_lanes);

// One pass's lanes on ctx. Marks are numbered like the nodes: mark k is
// recorded after node k's work on its lane. Inactive (every call does
// nothing) for `one_stream`, off CUDA and for a plan of one lane.
class PassLanes {
 public:
  PassLanes(Context& ctx, const LanePlan& plan, bool one_stream);
  ~PassLanes();  // end()
  PassLanes(const PassLanes&) = delete;
  PassLanes& operator=(const PassLanes&) = delete;

  bool active() const { return active_; }
  // Work of ctx goes to `lane` until leave().
  void enter(int lane);
  // The current stream (a lane, or the context's own) waits for mark k,
  // which must have been recorded in this pass.
  void wait_for(std::size_t k);
  // Records mark k on the current lane.
  void mark(std::size_t k);
  bool marked(std::size_t k) const { return marked_[k]; }
  void leave();
  // The context's stream waits for every lane; later calls do nothing.
  void end();

 private:
  Context& ctx_;
  bool active_ = false;
  std::vector<bool> marked_;
};

}  // namespace plexus::detail

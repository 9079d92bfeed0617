// Which convolutions the few-channel kernels take (few_channel_conv.h). Host
// logic only, so CPU-only builds link it too.
#include "convolution/few_channel_conv.h"

namespace plexus::layers::few_channel_conv {

namespace {

bool few_channel_input(const implicit_gemm::ConvProblem& problem) {
  return problem.in_channels >= 1 && problem.in_channels <= kMaxChannels && problem.kernel <= kMaxKernel &&
         problem.in_channels * problem.kernel * problem.kernel <= kMaxTaps && problem.out_channels >= 1;
}

}  // namespace

bool takes_forward(const implicit_gemm::ConvProblem& problem) { return few_channel_input(problem); }

bool takes_backward_weight(const implicit_gemm::ConvProblem& problem) { return few_channel_input(problem); }

}  // namespace plexus::layers::few_channel_conv

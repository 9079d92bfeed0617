// The in-process communicator: threads as ranks. Expected values are
// computed here from the inputs each rank was given.
#include <gtest/gtest.h>

#include "distributed/rank_threads.h"

namespace plexus::distributed {
namespace {

using testing::all_succeeded;
using testing::run_ranks;

// Rank r's element i is r * 10 + i * 0.5 (exact in f32): the sum over N ranks
// is 10 * N(N-1)/2 + N * i * 0.5.
TEST(InProcessCommunicator, AllReduceSumsAndAveragesOnEveryRank) {
  for (int world : {1, 2, 3, 4}) {
    const int n = 7;
    std::vector<std::vector<double>> sums(world), means(world);
    auto errors = run_ranks(world, [&](int rank, Communicator& comm) {
      Context ctx;
      std::vector<double> values(n);
      for (int i = 0; i < n; ++i) values[i] = rank * 10 + i * 0.5;
      Tensor a = Tensor::from_values(values, {n}), b = Tensor::from_values(values, {n});
      comm.all_reduce(ctx, a, Reduction::sum);
      comm.all_reduce(ctx, b, Reduction::average);
      sums[rank] = a.to_values();
      means[rank] = b.to_values();
    });
    std::string error;
    ASSERT_TRUE(all_succeeded(errors, &error)) << error;
    for (int rank = 0; rank < world; ++rank)
      for (int i = 0; i < n; ++i) {
        const double sum = 10.0 * world * (world - 1) / 2 + world * i * 0.5;
        EXPECT_DOUBLE_EQ(sums[rank][i], sum) << "world " << world << " rank " << rank << " i " << i;
        EXPECT_NEAR(means[rank][i], sum / world, 1e-6) << "world " << world << " rank " << rank << " i " << i;
      }
  }
}

TEST(InProcessCommunicator, BroadcastCopiesTheRootsBuffer) {
  const int world = 3;
  std::vector<std::vector<double>> got(world);
  auto errors = run_ranks(world, [&](int rank, Communicator& comm) {
    Context ctx;
    Tensor t = Tensor::from_values({double(rank), double(rank + 100)}, {2});
    comm.broadcast(ctx, t, 2);
    got[rank] = t.to_values();
  });
  ASSERT_TRUE(all_succeeded(errors));
  for (int rank = 0; rank < world; ++rank) EXPECT_EQ(got[rank], (std::vector<double>{2, 102})) << rank;
}

TEST(InProcessCommunicator, UnequalSizesAreAnErrorOnEveryRank) {
  auto errors = run_ranks(2, [&](int rank, Communicator& comm) {
    Context ctx;
    Tensor t({rank == 0 ? 3 : 4});
    comm.all_reduce(ctx, t, Reduction::sum);
  });
  for (const auto& error : errors)
    EXPECT_NE(error.find("rank 1 passed 4 elements but rank 0 passed 3"), std::string::npos) << error;
}

TEST(InProcessCommunicator, RejectsNonF32Buffers) {
  auto errors = run_ranks(1, [&](int, Communicator& comm) {
    Context ctx;
    Tensor t({2}, DType::f64);
    comm.all_reduce(ctx, t, Reduction::sum);
  });
  EXPECT_NE(errors[0].find("only f32"), std::string::npos) << errors[0];
}

// A rank that fails (throws) must not leave the others waiting forever: its
// abort releases them with an error naming it.
TEST(InProcessCommunicator, AFailedRankReleasesTheOthers) {
  auto errors = run_ranks(3, [&](int rank, Communicator& comm) {
    if (rank == 1) throw Error("rank 1 ran out of data");
    comm.barrier();
  });
  EXPECT_EQ(errors[1], "rank 1 ran out of data");
  for (int rank : {0, 2}) EXPECT_NE(errors[rank].find("rank 1 failed"), std::string::npos) << errors[rank];
}

// A rank that never arrives (hung, not failed): the others time out.
TEST(InProcessCommunicator, ARankThatNeverArrivesTimesOut) {
  InProcessGroup group(2, std::chrono::milliseconds(200));
  auto comm = group.communicator(0);
  try {
    comm->barrier();
    FAIL() << "the barrier returned without rank 1";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("waited more than 200 ms"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace plexus::distributed

// A worker's place in a data-parallel job, read from its launcher's
// environment variables: each launcher, their precedence, the local rank
// that picks the GPU, and the errors that name a missing or bad variable.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "plexus/error.h"
#include "plexus/train/worker_environment.h"

namespace plexus::train {
namespace {

using Variables = std::map<std::string, std::string>;

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

std::optional<WorkerEnvironment> read(const Variables& variables) {
  return worker_environment([&](const char* name) -> const char* {
    const auto it = variables.find(name);
    return it == variables.end() ? nullptr : it->second.c_str();
  });
}

// The ConfigError `variables` give, or "" when they give none.
std::string error_of(const Variables& variables) {
  try {
    read(variables);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

void expect_place(const Variables& variables, Launcher launcher, int rank, int local_rank, int world_size) {
  const auto environment = read(variables);
  ASSERT_TRUE(environment.has_value());
  EXPECT_EQ(environment->launcher, launcher) << launcher_name(environment->launcher);
  EXPECT_EQ(environment->rank, rank);
  EXPECT_EQ(environment->local_rank, local_rank);
  EXPECT_EQ(environment->world_size, world_size);
}

const Variables kOpenMpi{
    {"OMPI_COMM_WORLD_RANK", "9"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "16"}};

TEST(WorkerEnvironment, NoLauncherIsASingleProcess) {
  EXPECT_FALSE(read({}).has_value());
  // One SLURM task (a batch script, srun -n 1) may run --gpus N itself.
  EXPECT_FALSE(read({{"SLURM_PROCID", "0"}, {"SLURM_LOCALID", "0"}, {"SLURM_NTASKS", "1"}}).has_value());
  expect_place({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "1"}},
               Launcher::open_mpi, 0, 0, 1);
  EXPECT_FALSE(read({{"LOCAL_RANK", "0"}, {"MASTER_PORT", "29500"}, {"PLEXUS_RENDEZVOUS", "/x"}}).has_value());
}

TEST(WorkerEnvironment, ReadsEachLauncher) {
  expect_place({{"PLEXUS_RANK", "2"}, {"PLEXUS_WORLD_SIZE", "4"}, {"PLEXUS_RENDEZVOUS", "/tmp/meet"}}, Launcher::plexus,
               2, 2, 4);
  EXPECT_EQ(
      read({{"PLEXUS_RANK", "2"}, {"PLEXUS_WORLD_SIZE", "4"}, {"PLEXUS_RENDEZVOUS", "/tmp/meet"}})->rendezvous_file,
      "/tmp/meet");
  expect_place(kOpenMpi, Launcher::open_mpi, 9, 1, 16);
  expect_place({{"PMI_RANK", "5"}, {"PMI_SIZE", "8"}, {"MPI_LOCALRANKID", "1"}}, Launcher::mpich, 5, 1, 8);
  expect_place({{"SLURM_PROCID", "12"}, {"SLURM_LOCALID", "4"}, {"SLURM_NTASKS", "16"}}, Launcher::slurm, 12, 4, 16);
  const Variables torchrun{
      {"RANK", "3"}, {"LOCAL_RANK", "3"}, {"WORLD_SIZE", "8"}, {"MASTER_ADDR", "node-a"}, {"MASTER_PORT", "29500"}};
  expect_place(torchrun, Launcher::torchrun, 3, 3, 8);
  EXPECT_EQ(read(torchrun)->master_address, "node-a");
  EXPECT_EQ(read(torchrun)->master_port, 29500);
  EXPECT_TRUE(read(kOpenMpi)->started_by_mpi());
  EXPECT_FALSE(read(torchrun)->started_by_mpi());
  EXPECT_EQ(read(kOpenMpi)->describe(), "rank 9 of 16 (local rank 1), started by Open MPI");
}

// The TCP rendezvous listens on MASTER_PORT, unless torchrun's agent says
// that it holds that port itself (its store): then on the port after it.
TEST(WorkerEnvironment, TheRendezvousPortAvoidsTorchrunsAgentStore) {
  Variables torchrun{
      {"RANK", "1"}, {"LOCAL_RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "10.0.0.1"}, {"MASTER_PORT", "29500"}};
  EXPECT_FALSE(read(torchrun)->agent_holds_master_port);
  EXPECT_EQ(read(torchrun)->rendezvous_port(), 29500);
  torchrun["TORCHELASTIC_USE_AGENT_STORE"] = "False";
  EXPECT_EQ(read(torchrun)->rendezvous_port(), 29500);
  torchrun["TORCHELASTIC_USE_AGENT_STORE"] = "True";
  EXPECT_TRUE(read(torchrun)->agent_holds_master_port);
  EXPECT_EQ(read(torchrun)->rendezvous_port(), 29501);
  torchrun["MASTER_PORT"] = "65535";
  EXPECT_EQ(error_of(torchrun), "MASTER_PORT='65535' is not an integer in [1, 65534]");
  torchrun.erase("MASTER_PORT");
  EXPECT_EQ(read(torchrun)->rendezvous_port(), 0) << "no MASTER_PORT, no rendezvous port";
  // Only torchrun's variables count: Open MPI's ranks do not read them.
  Variables open_mpi = kOpenMpi;
  open_mpi.insert({{"MASTER_ADDR", "10.0.0.1"}, {"MASTER_PORT", "29500"}});
  EXPECT_EQ(read(open_mpi)->rendezvous_port(), 0);
}

// srun's PMI sets PMI_RANK and PMI_SIZE without Hydra's MPI_LOCALRANKID:
// the local rank is SLURM's, when SLURM describes the same task.
TEST(WorkerEnvironment, MpichUnderSrunTakesSlurmsLocalRank) {
  expect_place(
      {{"PMI_RANK", "5"}, {"PMI_SIZE", "8"}, {"SLURM_PROCID", "5"}, {"SLURM_LOCALID", "1"}, {"SLURM_NTASKS", "8"}},
      Launcher::mpich, 5, 1, 8);
  EXPECT_TRUE(contains(error_of({{"PMI_RANK", "5"}, {"PMI_SIZE", "8"}, {"SLURM_PROCID", "0"}, {"SLURM_LOCALID", "0"}}),
                       "MPI_LOCALRANKID is not set, and SLURM_PROCID='0' is not PMI_RANK='5'"));
  EXPECT_TRUE(
      contains(error_of({{"PMI_RANK", "5"}, {"PMI_SIZE", "8"}}), "MPI_LOCALRANKID is not set, but PMI_RANK is"));
}

// The launcher that started the process directly wins: mpirun inside a
// SLURM allocation, torchrun under srun or mpirun, supervise_workers' workers
// of a supervisor that mpirun started.
TEST(WorkerEnvironment, TheInnermostLauncherWins) {
  Variables mpirun_in_sbatch = kOpenMpi;
  mpirun_in_sbatch.insert({{"SLURM_PROCID", "0"}, {"SLURM_LOCALID", "0"}, {"SLURM_NTASKS", "2"}});
  expect_place(mpirun_in_sbatch, Launcher::open_mpi, 9, 1, 16);
  Variables torchrun_under_mpirun = kOpenMpi;
  torchrun_under_mpirun.insert({{"RANK", "13"}, {"LOCAL_RANK", "5"}, {"WORLD_SIZE", "32"}});
  expect_place(torchrun_under_mpirun, Launcher::torchrun, 13, 5, 32);
  Variables plexus_workers = kOpenMpi;
  plexus_workers.insert({{"PLEXUS_RANK", "1"}, {"PLEXUS_WORLD_SIZE", "2"}, {"PLEXUS_RENDEZVOUS", "/tmp/m"}});
  expect_place(plexus_workers, Launcher::plexus, 1, 1, 2);
  Variables mpich_in_sbatch{{"PMI_RANK", "3"}, {"PMI_SIZE", "4"}, {"MPI_LOCALRANKID", "3"}};
  mpich_in_sbatch.insert({{"SLURM_PROCID", "0"}, {"SLURM_LOCALID", "0"}, {"SLURM_NTASKS", "1"}});
  expect_place(mpich_in_sbatch, Launcher::mpich, 3, 3, 4);
}

TEST(WorkerEnvironment, OpenMpiAndMpichMustAgree) {
  Variables both = kOpenMpi;
  both.insert({{"PMI_RANK", "9"}, {"PMI_SIZE", "16"}});
  expect_place(both, Launcher::open_mpi, 9, 1, 16);
  both["PMI_RANK"] = "3";
  EXPECT_TRUE(contains(error_of(both), "Open MPI and MPICH both launched this process, and disagree: "
                                       "OMPI_COMM_WORLD_RANK=9 of OMPI_COMM_WORLD_SIZE=16 but PMI_RANK=3"))
      << error_of(both);
}

TEST(WorkerEnvironment, AMissingVariableIsNamed) {
  EXPECT_TRUE(contains(error_of({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}}),
                       "OMPI_COMM_WORLD_LOCAL_RANK is not set, but OMPI_COMM_WORLD_RANK is: Open MPI sets"));
  EXPECT_TRUE(contains(error_of({{"RANK", "0"}, {"LOCAL_RANK", "0"}}),
                       "WORLD_SIZE is not set, but RANK is: torchrun sets RANK, WORLD_SIZE, LOCAL_RANK"));
  EXPECT_TRUE(contains(error_of({{"WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"}}), "RANK is not set, but WORLD_SIZE is"));
  EXPECT_TRUE(contains(error_of({{"SLURM_PROCID", "0"}, {"SLURM_LOCALID", "0"}}),
                       "SLURM_NTASKS is not set, but SLURM_PROCID is"));
  EXPECT_TRUE(contains(error_of({{"PLEXUS_RANK", "0"}}), "PLEXUS_WORLD_SIZE is not set, but PLEXUS_RANK is"));
  EXPECT_TRUE(contains(error_of({{"PLEXUS_RANK", "0"}, {"PLEXUS_WORLD_SIZE", "1"}}),
                       "PLEXUS_RENDEZVOUS is not set, but PLEXUS_RANK is"));
}

TEST(WorkerEnvironment, BadValuesAreNamed) {
  auto with = [](const char* name, const char* value) {
    Variables variables = kOpenMpi;
    variables[name] = value;
    return error_of(variables);
  };
  EXPECT_EQ(with("OMPI_COMM_WORLD_RANK", "two"),
            "OMPI_COMM_WORLD_RANK='two' is not an integer in [0, 15] (below OMPI_COMM_WORLD_SIZE)");
  EXPECT_EQ(with("OMPI_COMM_WORLD_RANK", "16"),
            "OMPI_COMM_WORLD_RANK='16' is not an integer in [0, 15] (below OMPI_COMM_WORLD_SIZE)");
  EXPECT_EQ(with("OMPI_COMM_WORLD_RANK", "-1"),
            "OMPI_COMM_WORLD_RANK='-1' is not an integer in [0, 15] (below OMPI_COMM_WORLD_SIZE)");
  EXPECT_EQ(with("OMPI_COMM_WORLD_RANK", "3 "),
            "OMPI_COMM_WORLD_RANK='3 ' is not an integer in [0, 15] (below OMPI_COMM_WORLD_SIZE)");
  EXPECT_EQ(with("OMPI_COMM_WORLD_LOCAL_RANK", "16"),
            "OMPI_COMM_WORLD_LOCAL_RANK='16' is not an integer in [0, 15] (below OMPI_COMM_WORLD_SIZE)");
  EXPECT_EQ(with("OMPI_COMM_WORLD_SIZE", "0"), "OMPI_COMM_WORLD_SIZE='0' is not an integer in [1, 1048576]");
  EXPECT_EQ(with("OMPI_COMM_WORLD_SIZE", "99999999999999999999"),
            "OMPI_COMM_WORLD_SIZE='99999999999999999999' is not an integer in [1, 1048576]");
  EXPECT_EQ(error_of({{"RANK", "0"}, {"LOCAL_RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "http"}}),
            "MASTER_PORT='http' is not an integer in [1, 65535]");
  EXPECT_EQ(error_of({{"PLEXUS_RANK", "0"}, {"PLEXUS_WORLD_SIZE", "65"}, {"PLEXUS_RENDEZVOUS", "/x"}}),
            "PLEXUS_WORLD_SIZE='65' is not an integer in [1, 64]");
}

}  // namespace
}  // namespace plexus::train

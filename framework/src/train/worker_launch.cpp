#include "plexus/train/worker_launch.h"

#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include <spdlog/spdlog.h>

#include "plexus/error.h"

extern char** environ;

namespace plexus::train {

namespace {

// What the first SIGINT or SIGTERM to the supervisor sends every worker.
constexpr int kPassedOnStop = SIGINT;

volatile std::sig_atomic_t stop_signals = 0;
volatile std::sig_atomic_t last_stop_signal = 0;
extern "C" void count_stop_signal(int signal_number) {
  last_stop_signal = signal_number;
  stop_signals = stop_signals + 1;
}

std::string how_it_ended(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const int number = WTERMSIG(status);
    return "was killed by signal " + std::to_string(number) + " (" + strsignal(number) + ")";
  }
  return "ended with wait status " + std::to_string(status);
}

struct Worker {
  pid_t pid = -1;
  bool running = false;
};

void kill_all(std::vector<Worker>& workers, int signal_number) {
  for (const Worker& worker : workers)
    if (worker.running) kill(worker.pid, signal_number);
}

// This process's environment without the worker variables: what every worker inherits.
std::vector<std::string> inherited_environment() {
  std::vector<std::string> inherited;
  for (char** entry = environ; *entry; ++entry) {
    const std::string variable = *entry;
    bool ours = false;
    for (const char* name : {kRankVariable, kWorldSizeVariable, kRendezvousVariable})
      ours = ours || variable.rfind(std::string(name) + "=", 0) == 0;
    if (!ours) inherited.push_back(variable);
  }
  return inherited;
}

// Forks and execs `command` once per rank, each with the inherited
// environment and its worker variables. When a fork fails, the workers
// already started are killed and reaped before the error is thrown.
std::vector<Worker> start_workers(const std::vector<std::string>& command, int world_size,
                                  const std::string& rendezvous_file) {
  // Everything the children need is built before fork(): a child only execs.
  std::vector<std::string> arguments = command;
  std::vector<char*> argv;
  for (auto& argument : arguments) argv.push_back(argument.data());
  argv.push_back(nullptr);
  const std::vector<std::string> inherited = inherited_environment();
  const pid_t supervisor = getpid();
  std::vector<Worker> workers(static_cast<std::size_t>(world_size));
  for (int rank = 0; rank < world_size; ++rank) {
    std::vector<std::string> variables = inherited;
    variables.push_back(std::string(kRankVariable) + "=" + std::to_string(rank));
    variables.push_back(std::string(kWorldSizeVariable) + "=" + std::to_string(world_size));
    variables.push_back(std::string(kRendezvousVariable) + "=" + rendezvous_file);
    std::vector<char*> envp;
    for (auto& variable : variables) envp.push_back(variable.data());
    envp.push_back(nullptr);
    const pid_t pid = fork();
    if (pid < 0) {
      const int error = errno;
      kill_all(workers, SIGKILL);
      for (Worker& worker : workers)
        if (worker.running) waitpid(worker.pid, nullptr, 0);
      throw Error("cannot start worker " + std::to_string(rank) + ": fork failed: " + std::strerror(error));
    }
    if (pid == 0) {
      // The worker's own process group: a terminal's Ctrl-C reaches the
      // supervisor only, which passes it on exactly once. And it dies with
      // the supervisor.
      setpgid(0, 0);
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != supervisor) _exit(127);
      execve(argv[0], argv.data(), envp.data());
      _exit(127);
    }
    workers[static_cast<std::size_t>(rank)] = {pid, true};
  }
  return workers;
}

// Waits for every worker, passing stop requests on; the first worker that
// fails ends the run (the others are killed). Returns the run's exit code.
int wait_for_workers(std::vector<Worker>& workers) {
  const int world_size = static_cast<int>(workers.size());
  int stops_passed_on = 0;
  int running = world_size;
  int result = kExitOk;
  while (running > 0) {
    if (stop_signals > stops_passed_on) {
      // The first request is passed on (the workers save and stop); a second kills them.
      kill_all(workers, stops_passed_on == 0 ? kPassedOnStop : SIGKILL);
      stops_passed_on = stop_signals;
    }
    int status = 0;
    // Polled, so a signal that arrives just before the wait is not missed.
    const pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid == 0 || (pid < 0 && errno == EINTR)) {
      usleep(20000);
      continue;
    }
    if (pid < 0) break;  // ECHILD: none left
    int rank = -1;
    for (int r = 0; r < world_size; ++r)
      if (workers[static_cast<std::size_t>(r)].pid == pid) rank = r;
    if (rank < 0) continue;  // not one of ours
    workers[static_cast<std::size_t>(rank)].running = false;
    --running;
    const bool clean = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    // Stopped by a signal (passed on by us, or sent to a worker directly):
    // the workers agree on a step and rank 0 saves; not a failure.
    const bool stopped = WIFEXITED(status) && WEXITSTATUS(status) == kExitInterrupted;
    // Ended by the SIGINT we passed on: the worker was still starting (its
    // handlers come before its training loop), so it had nothing to save.
    const bool stopped_while_starting = stops_passed_on > 0 && WIFSIGNALED(status) && WTERMSIG(status) == kPassedOnStop;
    if (stopped_while_starting)
      spdlog::info("worker rank {} of {} (pid {}) was stopped while starting, before its first step", rank, world_size,
                   pid);
    if (stopped || stopped_while_starting) result = result == kExitOk ? kExitInterrupted : result;
    if (clean || stopped || stopped_while_starting) continue;
    if (result != kExitError)
      spdlog::error("worker rank {} of {} (pid {}) {}; stopping the other rank(s). Its messages are above; the last "
                    "checkpoint rank 0 saved is kept",
                    rank, world_size, pid, how_it_ended(status));
    result = kExitError;
    kill_all(workers, SIGKILL);
  }
  return result;
}

}  // namespace

int supervise_workers(const std::vector<std::string>& command, int world_size, const std::string& rendezvous_file) {
  if (command.empty()) throw ConfigError("no worker command to start");
  if (world_size < 1 || world_size > kMaxWorkers)
    throw ConfigError("the number of workers must be in [1, " + std::to_string(kMaxWorkers) + "], got " +
                      std::to_string(world_size));
  std::error_code ignored;
  std::filesystem::remove(rendezvous_file, ignored);  // a stale id would make the workers join an old job

  struct sigaction action {};
  action.sa_handler = count_stop_signal;
  sigemptyset(&action.sa_mask);
  struct sigaction old_int {
  }, old_term{};
  sigaction(SIGINT, &action, &old_int);
  sigaction(SIGTERM, &action, &old_term);
  stop_signals = 0;

  std::vector<Worker> workers = start_workers(command, world_size, rendezvous_file);
  spdlog::info("started {} worker(s), ranks 0-{}", world_size, world_size - 1);
  const int result = wait_for_workers(workers);
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  std::filesystem::remove(rendezvous_file, ignored);
  return result;
}

}  // namespace plexus::train

#pragma once
// Runs build/bin/plexus-ae as a child process, as a user would, capturing
// its exit code, stdout and stderr.
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "data/data_test_support.h"

namespace plexus::testing {

struct CommandResult {
  int exit_code = -1;   // -1 when killed by a signal
  int term_signal = 0;  // the signal that killed it, if any
  // Its peak resident memory (wait4's ru_maxrss), which counts this process's
  // memory that the child held between its fork and its exec.
  std::uint64_t peak_resident_bytes = 0;
  std::string out;
  std::string err;
  std::string command;
  // For assertion messages.
  std::string describe() const {
    return "command: " + command + "\nexit code: " + std::to_string(exit_code) + "\n--- stdout ---\n" + out +
           "--- stderr ---\n" + err;
  }
};

class Process {
 public:
  // Starts `executable args...` with stdout and stderr sent to files in
  // `scratch`, and standard input read from the file `input`.
  Process(const std::string& executable, const std::vector<std::string>& args, const std::string& scratch,
          const std::string& input = "/dev/null") {
    static int counter = 0;
    const std::string tag = std::to_string(counter++);
    out_path_ = scratch + "/.stdout-" + tag;
    err_path_ = scratch + "/.stderr-" + tag;
    command_ = executable;
    for (const auto& arg : args) command_ += " " + arg;
    // Everything the child needs is prepared before fork(): the child only
    // redirects and execs.
    std::vector<std::string> argv_strings{executable};
    argv_strings.insert(argv_strings.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& s : argv_strings) argv.push_back(s.data());
    argv.push_back(nullptr);
    std::vector<char*> envp;  // this environment without PLEXUS_PLUGIN_PATH
    for (char** e = environ; *e; ++e)
      if (std::string(*e).rfind("PLEXUS_PLUGIN_PATH=", 0) != 0) envp.push_back(*e);
    envp.push_back(nullptr);
    pid_ = fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      int in = open(input.c_str(), O_RDONLY);
      int out = open(out_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      int err = open(err_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(in, 0);
      dup2(out, 1);
      dup2(err, 2);
      execve(executable.c_str(), argv.data(), envp.data());
      _exit(127);
    }
  }
  void send(int signal_number) { kill(pid_, signal_number); }
  bool running() {
    if (done_) return false;
    int status = 0;
    if (wait4(pid_, &status, WNOHANG, &usage_) == pid_) {
      done_ = true;
      status_ = status;
      return false;
    }
    return true;
  }
  CommandResult wait() {
    if (!done_) {
      wait4(pid_, &status_, 0, &usage_);
      done_ = true;
    }
    CommandResult result;
    result.command = command_;
    if (WIFEXITED(status_)) result.exit_code = WEXITSTATUS(status_);
    if (WIFSIGNALED(status_)) result.term_signal = WTERMSIG(status_);
    result.peak_resident_bytes = static_cast<std::uint64_t>(usage_.ru_maxrss) * 1024;
    result.out = read_bytes(out_path_);
    result.err = read_bytes(err_path_);
    return result;
  }

 private:
  pid_t pid_ = -1;
  bool done_ = false;
  int status_ = 0;
  struct rusage usage_ {};
  std::string out_path_, err_path_, command_;
};

inline CommandResult run_plexus_ae(const std::vector<std::string>& args, const std::string& scratch,
                                   const std::string& input = "/dev/null") {
  return Process(PLEXUS_AE_EXECUTABLE, args, scratch, input).wait();
}

// Polls `condition` every 20 ms for up to `seconds`.
inline bool wait_until(const std::function<bool()>& condition, double seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return condition();
}

inline bool contains(const std::string& text, const std::string& fragment) {
  return text.find(fragment) != std::string::npos;
}

inline std::string test_model(const std::string& name) { return std::string(PLEXUS_TEST_MODELS) + "/" + name; }

// The arguments of a tiny CPU training run (tiny.json, 16x16 patches, batch 2,
// seed 3, one loader thread) on the images in `images`, writing to `out`.
inline std::vector<std::string> tiny_train_args(const std::string& images, const std::string& out, std::int64_t steps,
                                                std::vector<std::string> extra = {}) {
  std::vector<std::string> args{"train",
                                "--data",
                                images,
                                "--model",
                                test_model("tiny.json"),
                                "--patch",
                                "16",
                                "--batch",
                                "2",
                                "--lr",
                                "0.005",
                                "--steps",
                                std::to_string(steps),
                                "--seed",
                                "3",
                                "--device",
                                "cpu",
                                "--threads",
                                "1",
                                "--out",
                                out};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

}  // namespace plexus::testing

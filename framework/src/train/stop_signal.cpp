#include "plexus/train/stop_signal.h"

#include <csignal>

namespace plexus::train {

namespace {
volatile std::sig_atomic_t stop_signal = 0;

extern "C" void on_stop_signal(int signal_number) { stop_signal = signal_number; }
}  // namespace

void install_stop_handlers() {
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESETHAND;  // a second signal gets the default action
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

bool stop_requested(int* signal_number) {
  if (signal_number) *signal_number = stop_signal;
  return stop_signal != 0;
}

}  // namespace plexus::train

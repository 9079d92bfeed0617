#pragma once
// Ctrl-C (SIGINT) and SIGTERM during training: the first one only raises a
// flag, which the training loop checks after every step to save a checkpoint
// and exit; a second one terminates at once (the handlers are one-shot).
namespace plexus::train {

void install_stop_handlers();
// True once SIGINT or SIGTERM arrived; `signal_number` receives which.
bool stop_requested(int* signal_number = nullptr);

}  // namespace plexus::train

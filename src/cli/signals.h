// Waiting for termination signals without a handler or any global state.
//
// The constructor blocks SIGINT and SIGTERM in the calling thread; threads started afterwards
// inherit the mask, so the signals stay pending until wait() takes them with sigtimedwait.
// REQUIRES: construct it in main() before any thread is started.
#ifndef KILN_CLI_SIGNALS_H_
#define KILN_CLI_SIGNALS_H_

#include <signal.h>

#include <cstdint>

namespace kiln::cli {

class TerminationSignals {
 public:
  TerminationSignals();
  // Waits up to `timeout_ms` for SIGINT or SIGTERM; returns the signal number, or 0 on timeout.
  int wait(int64_t timeout_ms);

 private:
  sigset_t set_;
};

}  // namespace kiln::cli

#endif  // KILN_CLI_SIGNALS_H_

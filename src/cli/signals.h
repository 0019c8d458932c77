// Waiting for termination signals without a handler or any global state.
//
// The constructor blocks SIGINT and SIGTERM in the calling thread; threads started afterwards
// inherit the mask, so the signals stay pending until wait() takes them with sigtimedwait.
// REQUIRES: construct it in main() before any thread is started.
#ifndef KILN_CLI_SIGNALS_H_
#define KILN_CLI_SIGNALS_H_

#include <signal.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>

namespace kiln::cli {

class TerminationSignals {
 public:
  TerminationSignals();
  // Waits up to `timeout_ms` for SIGINT or SIGTERM; returns the signal number, or 0 on timeout.
  int wait(int64_t timeout_ms);

 private:
  sigset_t set_;
};

// SIGUSR1 as a request ("dump your flight recorder"), handled on a thread of its own.
// The constructor blocks SIGUSR1 in the calling thread (construct it in main() before any thread
// starts, so every thread inherits the mask); start() then runs `handler` on a helper thread each
// time the signal arrives, until destruction.
class UserSignalThread {
 public:
  UserSignalThread();
  ~UserSignalThread();
  UserSignalThread(const UserSignalThread&) = delete;
  UserSignalThread& operator=(const UserSignalThread&) = delete;

  // REQUIRES: called at most once.
  void start(std::function<void()> handler);

 private:
  sigset_t set_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace kiln::cli

#endif  // KILN_CLI_SIGNALS_H_

// Signals without handlers or any global state: they are blocked and taken with sigtimedwait.
//
// TerminationSignals: the constructor blocks SIGINT and SIGTERM in the calling thread; threads
// started afterwards inherit the mask, so the signals stay pending until wait() takes them.
// REQUIRES: construct it in main() before any thread is started.
#ifndef KILN_CLI_SIGNALS_H_
#define KILN_CLI_SIGNALS_H_

#include <signal.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <initializer_list>
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

// Signals as requests ("dump your flight recorder", "stop at the next step"), taken on a thread
// of its own, so no handler runs in signal context and nothing but this object holds state.
// The constructor blocks `signals` in the calling thread (construct it in main() before any
// thread starts, so every thread inherits the mask); start() then runs `handler(signal)` on a
// helper thread each time one arrives, until destruction. Signals that arrive before start()
// stay pending and are handled once it runs. Children started with LocalJob get an empty mask.
class SignalThread {
 public:
  explicit SignalThread(std::initializer_list<int> signals);
  ~SignalThread();
  SignalThread(const SignalThread&) = delete;
  SignalThread& operator=(const SignalThread&) = delete;

  // REQUIRES: called at most once.
  void start(std::function<void(int signal)> handler);
  // Joins the helper thread (within 100 ms); the handler never runs again. Idempotent.
  void stop();

 private:
  sigset_t set_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace kiln::cli

#endif  // KILN_CLI_SIGNALS_H_

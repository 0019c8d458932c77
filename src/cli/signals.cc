// See signals.h.
#include "cli/signals.h"

#include <pthread.h>

#include <cerrno>
#include <ctime>

namespace kiln::cli {

TerminationSignals::TerminationSignals() {
  sigemptyset(&set_);
  sigaddset(&set_, SIGINT);
  sigaddset(&set_, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set_, nullptr);
}

int TerminationSignals::wait(int64_t timeout_ms) {
  if (timeout_ms < 0) timeout_ms = 0;
  timespec timeout{};
  timeout.tv_sec = static_cast<time_t>(timeout_ms / 1000);
  timeout.tv_nsec = static_cast<long>((timeout_ms % 1000) * 1'000'000);
  // EAGAIN: timed out. EINTR: another signal interrupted the wait, which only shortens it.
  const int sig = sigtimedwait(&set_, nullptr, &timeout);
  return sig > 0 ? sig : 0;
}

SignalThread::SignalThread(std::initializer_list<int> signals) {
  sigemptyset(&set_);
  for (int sig : signals)
    sigaddset(&set_, sig);
  pthread_sigmask(SIG_BLOCK, &set_, nullptr);
}

SignalThread::~SignalThread() {
  stop();
}

void SignalThread::stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

void SignalThread::start(std::function<void(int signal)> handler) {
  thread_ = std::thread([this, handler = std::move(handler)] {
    // Wake every 100 ms to notice stop_: sigtimedwait has no other way to be interrupted.
    const timespec period{0, 100'000'000};
    while (!stop_) {
      const int sig = sigtimedwait(&set_, nullptr, &period);
      if (sig > 0) handler(sig);
    }
  });
}

}  // namespace kiln::cli

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

UserSignalThread::UserSignalThread() {
  sigemptyset(&set_);
  sigaddset(&set_, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &set_, nullptr);
}

UserSignalThread::~UserSignalThread() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

void UserSignalThread::start(std::function<void()> handler) {
  thread_ = std::thread([this, handler = std::move(handler)] {
    // Wake every 100 ms to notice stop_: sigtimedwait has no other way to be interrupted.
    const timespec period{0, 100'000'000};
    while (!stop_) {
      if (sigtimedwait(&set_, nullptr, &period) == SIGUSR1) handler();
    }
  });
}

}  // namespace kiln::cli

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
  while (true) {
    const int sig = sigtimedwait(&set_, nullptr, &timeout);
    if (sig > 0) return sig;
    // EAGAIN: timed out. EINTR: another signal interrupted the wait; the remaining time is not
    // tracked here, so a stray signal can only shorten the wait, never lengthen it.
    return 0;
  }
}

}  // namespace kiln::cli

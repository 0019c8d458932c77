// See include/kiln/comm/work.h and work_state.h.
#include <kiln/comm/work.h>

#include "comm/work_state.h"

namespace kiln::comm {

void Work::State::finish(Status result) {
  {
    std::lock_guard lock(mu);
    if (done) return;
    status = std::move(result);
    done = true;
  }
  cv.notify_all();
}

Work Work::done(Status status) {
  auto state = std::make_shared<State>();
  state->label = "completed op";
  state->finish(std::move(status));
  return Work(std::move(state));
}

Status Work::wait() const {
  if (!state_) return Status();
  std::unique_lock lock(state_->mu);
  state_->cv.wait(lock, [&] { return state_->done; });
  return state_->status;
}

Status Work::wait(int64_t timeout_ms) const {
  if (!state_) return Status();
  std::unique_lock lock(state_->mu);
  if (!state_->cv.wait_until(lock, Deadline::after_ms(timeout_ms).to_steady(),
                             [&] { return state_->done; })) {
    return Status::timeout(state_->label + ": not finished after waiting " +
                           std::to_string(timeout_ms) + " ms");
  }
  return state_->status;
}

bool Work::completed() const {
  if (!state_) return true;
  std::lock_guard lock(state_->mu);
  return state_->done;
}

}  // namespace kiln::comm

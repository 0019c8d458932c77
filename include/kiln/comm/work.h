// Work: the handle an asynchronous collective returns. Wait on it to learn how the op ended.
//
//   Work w = comm->allreduce(grads, grads, n, DataType::kF32, ReduceOp::kAvg);
//   ... overlap other work ...
//   KILN_RETURN_IF_ERROR(w.wait());
//
// A Work is cheap to copy (shared state). Every op has a deadline once it starts running (the
// communicator's timeout), so wait() without a timeout is bounded by the ops queued before it
// plus this one; wait(timeout_ms) bounds it explicitly. Thread-safe.
#ifndef KILN_COMM_WORK_H_
#define KILN_COMM_WORK_H_

#include <cstdint>
#include <memory>

#include <kiln/base/status.h>

namespace kiln::comm {

class Work {
 public:
  struct State;  // private; defined in work.cc

  // An already-finished Work with `status` (OK for a no-op such as a world of one).
  static Work done(Status status = Status());

  Work() = default;  // a finished, OK Work
  explicit Work(std::shared_ptr<State> state) : state_(std::move(state)) {}

  // Waits for the op to finish and returns its status.
  Status wait() const;
  // Waits at most `timeout_ms`; kTimeout (naming the op) if it has not finished by then. The op
  // itself keeps running and fails on its own deadline.
  Status wait(int64_t timeout_ms) const;
  // True once the op finished (successfully or not).
  bool completed() const;

  const std::shared_ptr<State>& state() const { return state_; }

 private:
  std::shared_ptr<State> state_;
};

}  // namespace kiln::comm

#endif  // KILN_COMM_WORK_H_

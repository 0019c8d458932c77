// The shared state behind a Work handle: set once by the communicator when the op ends.
#ifndef KILN_COMM_WORK_STATE_H_
#define KILN_COMM_WORK_STATE_H_

#include <kiln/base/clock.h>
#include <kiln/comm/work.h>

#include <condition_variable>
#include <mutex>
#include <string>

namespace kiln::comm {

struct Work::State {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;  // GUARDED_BY(mu); moves false -> true once
  Status status;      // GUARDED_BY(mu); valid once done
  std::string label;  // "allreduce seq=12 bytes=4096", for wait(timeout) errors

  // Records the result and wakes waiters. Later calls are ignored.
  void finish(Status result);
};

}  // namespace kiln::comm

#endif  // KILN_COMM_WORK_STATE_H_

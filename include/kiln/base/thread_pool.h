// ThreadPool: a fixed set of threads that run one parallel loop at a time, for compute kernels.
//
//   pool.parallel_for(tasks, [&](int64_t task, int thread) { ...work on task... });
//
// The calling thread takes part, so a pool of size n has n-1 helper threads. Tasks are claimed
// one at a time from a shared counter (dynamic scheduling: a causal attention block near the
// diagonal is cheaper than one far from it, and no thread idles while another still has a
// backlog). `thread` is in [0, size()) and unique among the threads running concurrently, for
// per-thread scratch.
//
// Helpers spin for a short while after a loop (another loop usually follows within
// microseconds: kernels come in sequences), then sleep, so an idle pool costs no CPU.
//
// parallel_for is not reentrant and must be called from one thread at a time.
#ifndef KILN_BASE_THREAD_POOL_H_
#define KILN_BASE_THREAD_POOL_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <kiln/base/function_ref.h>
#include <kiln/base/result.h>

namespace kiln {

class ThreadPool {
 public:
  // A pool of `threads` threads, or kUnavailable naming the thread that could not be started and
  // the limits that usually cause it (a user's --threads 300 under ulimit -u or -v). Use this
  // wherever the count comes from a user.
  // REQUIRES: threads >= 1.
  static Result<std::unique_ptr<ThreadPool>> create(int threads);

  // As create(), for counts a program chose; a thread that cannot start is a check failure.
  // REQUIRES: threads >= 1.
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(helpers_.size()) + 1; }

  // Runs fn(task, thread) for every task in [0, tasks) and returns when all have run.
  void parallel_for(int64_t tasks, FunctionRef<void(int64_t task, int thread)> fn);

 private:
  struct Unstarted {};
  explicit ThreadPool(Unstarted) {}
  // Starts helpers 1..threads-1; on failure the ones started stay (the destructor joins them).
  Status start_helpers(int threads);
  void helper_loop(int thread);
  void run_tasks(int thread);

  std::vector<std::thread> helpers_;
  // The current loop, published under mu_ by bumping generation_.
  std::mutex mu_;
  std::condition_variable wake_;
  std::condition_variable done_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int64_t> next_task_{0};
  int64_t tasks_ = 0;
  const FunctionRef<void(int64_t, int)>* fn_ = nullptr;
  std::atomic<int> helpers_busy_{0};
  bool stopping_ = false;  // GUARDED_BY(mu_)
};

}  // namespace kiln

#endif  // KILN_BASE_THREAD_POOL_H_

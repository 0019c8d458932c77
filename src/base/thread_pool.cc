// See include/kiln/base/thread_pool.h.
//
// A loop is published by storing its function and task count, resetting the task counter and
// bumping generation_ under mu_. Helpers notice the new generation (spinning briefly, else woken
// through wake_), claim tasks until the counter passes the count, and the last one to finish
// wakes the caller through done_ (which spins first too).
#include <kiln/base/check.h>
#include <kiln/base/clock.h>
#include <kiln/base/thread_pool.h>

#include <immintrin.h>

#include <string>
#include <system_error>

namespace kiln {
namespace {

// How long a helper spins for the next loop before sleeping, and how long the caller spins for
// helpers to finish before sleeping: kernels come in quick succession (a training step runs
// hundreds of loops), and a futex wake-up costs 20-25 us on these VMs.
constexpr int64_t kSpinNs = 50'000;

}  // namespace

Status ThreadPool::start_helpers(int threads) {
  KILN_CHECK_GE(threads, 1);
  helpers_.reserve(static_cast<size_t>(threads - 1));
  for (int t = 1; t < threads; ++t) {
    try {
      helpers_.emplace_back([this, t] { helper_loop(t); });
    } catch (const std::system_error& e) {
      return Status::unavailable(
          "thread pool of " + std::to_string(threads) + " threads: cannot start thread " +
          std::to_string(t + 1) + ": " + e.what() +
          " (the limit on processes and threads, ulimit -u, or on memory, ulimit -v, is "
          "reached: ask for fewer threads)");
    }
  }
  return Status();
}

Result<std::unique_ptr<ThreadPool>> ThreadPool::create(int threads) {
  std::unique_ptr<ThreadPool> pool(new ThreadPool(Unstarted{}));
  Status started = pool->start_helpers(threads);
  if (!started.ok()) return started;  // the pool's destructor joins the helpers it started
  return pool;
}

ThreadPool::ThreadPool(int threads) {
  Status started = start_helpers(threads);
  KILN_CHECK(started.ok()) << started.message();
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_all();
  for (std::thread& t : helpers_)
    t.join();
}

void ThreadPool::run_tasks(int thread) {
  while (true) {
    const int64_t task = next_task_.fetch_add(1, std::memory_order_relaxed);
    if (task >= tasks_) return;
    (*fn_)(task, thread);
  }
}

void ThreadPool::parallel_for(int64_t tasks, FunctionRef<void(int64_t task, int thread)> fn) {
  if (tasks <= 0) return;
  if (helpers_.empty() || tasks == 1) {
    for (int64_t t = 0; t < tasks; ++t)
      fn(t, 0);
    return;
  }
  {
    std::lock_guard lock(mu_);
    tasks_ = tasks;
    fn_ = &fn;
    next_task_.store(0, std::memory_order_relaxed);
    helpers_busy_.store(static_cast<int>(helpers_.size()), std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_all();
  run_tasks(0);
  const int64_t start = monotonic_now_ns();
  while (helpers_busy_.load(std::memory_order_acquire) != 0) {
    if (monotonic_now_ns() - start > kSpinNs) {
      std::unique_lock lock(mu_);
      done_.wait(lock, [&] { return helpers_busy_.load(std::memory_order_acquire) == 0; });
      break;
    }
    _mm_pause();
  }
  fn_ = nullptr;
}

void ThreadPool::helper_loop(int thread) {
  uint64_t seen = 0;
  while (true) {
    const int64_t start = monotonic_now_ns();
    while (generation_.load(std::memory_order_acquire) == seen) {
      if (monotonic_now_ns() - start > kSpinNs) {
        std::unique_lock lock(mu_);
        wake_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
        break;
      }
      _mm_pause();
    }
    {
      std::lock_guard lock(mu_);
      if (stopping_) return;
      seen = generation_.load(std::memory_order_acquire);
    }
    run_tasks(thread);
    if (helpers_busy_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard lock(mu_);
      done_.notify_one();
    }
  }
}

}  // namespace kiln

// BoundedQueue<T>: a multi-producer multi-consumer FIFO with a fixed capacity.
//
// Backpressure is explicit: a full queue makes push() wait (up to its timeout) or try_push() fail;
// it never grows. close() wakes everyone: pushes fail with kAborted at once, pops drain what is
// left and then fail with kAborted. Every blocking call takes a timeout.
//
// Thread-safe. Capacity is fixed at construction and must be at least 1.
#ifndef KILN_BASE_BOUNDED_QUEUE_H_
#define KILN_BASE_BOUNDED_QUEUE_H_

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <mutex>
#include <string>
#include <utility>

#include <kiln/base/check.h>
#include <kiln/base/clock.h>
#include <kiln/base/result.h>
#include <kiln/base/status.h>

namespace kiln {

template <typename T>
class BoundedQueue {
 public:
  // `name` appears in error messages ("queue 'ckpt-writes' is full after 100 ms").
  BoundedQueue(std::string name, size_t capacity) : name_(std::move(name)), capacity_(capacity) {
    KILN_CHECK_GE(capacity_, size_t{1}) << "queue '" << name_ << "'";
  }
  BoundedQueue(const BoundedQueue&) = delete;
  BoundedQueue& operator=(const BoundedQueue&) = delete;

  // Appends `item`, waiting up to `timeout_ms` for room.
  // Returns kTimeout if still full at the deadline, kAborted if the queue is closed.
  Status push(T item, int64_t timeout_ms) {
    const Deadline deadline = Deadline::after_ms(timeout_ms);
    std::unique_lock lock(mu_);
    if (!not_full_.wait_until(lock, deadline.to_steady(),
                              [&] { return closed_ || items_.size() < capacity_; })) {
      return Status::timeout("queue '" + name_ + "' is full (capacity " +
                             std::to_string(capacity_) + ") after " + std::to_string(timeout_ms) +
                             " ms");
    }
    if (closed_) return Status::aborted("queue '" + name_ + "' is closed");
    items_.push_back(std::move(item));
    not_empty_.notify_one();
    return Status();
  }

  // Appends `item` only if there is room right now. Returns false if full or closed.
  bool try_push(T item) {
    std::lock_guard lock(mu_);
    if (closed_ || items_.size() >= capacity_) return false;
    items_.push_back(std::move(item));
    not_empty_.notify_one();
    return true;
  }

  // Removes the oldest item, waiting up to `timeout_ms` for one.
  // Returns kTimeout if still empty at the deadline, kAborted if closed and drained.
  Result<T> pop(int64_t timeout_ms) {
    const Deadline deadline = Deadline::after_ms(timeout_ms);
    std::unique_lock lock(mu_);
    if (!not_empty_.wait_until(lock, deadline.to_steady(),
                               [&] { return closed_ || !items_.empty(); })) {
      return Status::timeout("queue '" + name_ + "' is empty after " + std::to_string(timeout_ms) +
                             " ms");
    }
    if (items_.empty()) return Status::aborted("queue '" + name_ + "' is closed");
    T item = std::move(items_.front());
    items_.pop_front();
    not_full_.notify_one();
    return item;
  }

  // After close(), push() fails and pop() drains the remaining items. Idempotent.
  void close() {
    std::lock_guard lock(mu_);
    closed_ = true;
    not_full_.notify_all();
    not_empty_.notify_all();
  }

  size_t size() const {
    std::lock_guard lock(mu_);
    return items_.size();
  }
  size_t capacity() const { return capacity_; }
  bool closed() const {
    std::lock_guard lock(mu_);
    return closed_;
  }

 private:
  const std::string name_;
  const size_t capacity_;
  mutable std::mutex mu_;
  std::condition_variable not_full_;
  std::condition_variable not_empty_;
  std::deque<T> items_;  // GUARDED_BY(mu_); size() <= capacity_
  bool closed_ = false;  // GUARDED_BY(mu_); only moves false -> true
};

}  // namespace kiln

#endif  // KILN_BASE_BOUNDED_QUEUE_H_

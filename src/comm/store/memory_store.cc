// MemoryStore: the in-process Store, for tests that run ranks as threads.
//
// A Table behind one mutex; every mutation notifies one condition variable, and waiters re-check
// their keys when woken. The limits are StoreServerOptions' defaults, so a test that passes on
// the memory store does not fail on a default server for being too big.
#include <condition_variable>
#include <mutex>

#include "comm/store/protocol.h"
#include "comm/store/table.h"

namespace kiln::comm {
namespace {

class MemoryStore final : public Store {
 public:
  MemoryStore() : table_(default_limits()) {}

  Status set(std::string_view key, std::string_view value) override {
    KILN_RETURN_IF_ERROR(store::check_key(key));
    KILN_RETURN_IF_ERROR(store::check_value(key, value));
    std::lock_guard<std::mutex> lock(mu_);
    KILN_RETURN_IF_ERROR(table_.set(key, value));
    changed_.notify_all();
    return Status();
  }

  Result<std::string> get(std::string_view key, int64_t timeout_ms) override {
    KILN_RETURN_IF_ERROR(store::check_key(key));
    const Deadline deadline = Deadline::after_ms(timeout_ms);
    std::unique_lock<std::mutex> lock(mu_);
    const bool found = wait_until(lock, deadline, [&] { return table_.find(key) != nullptr; });
    if (!found) return store::get_timeout_status(key, std::max<int64_t>(timeout_ms, 0));
    return *table_.find(key);
  }

  Status wait(const std::vector<std::string>& keys, int64_t timeout_ms) override {
    KILN_RETURN_IF_ERROR(store::check_wait_keys(keys));
    const Deadline deadline = Deadline::after_ms(timeout_ms);
    std::unique_lock<std::mutex> lock(mu_);
    const bool all = wait_until(lock, deadline, [&] { return table_.missing(keys).empty(); });
    if (all) return Status();
    return store::wait_timeout_status(table_.missing(keys), keys.size(),
                                      std::max<int64_t>(timeout_ms, 0));
  }

  Result<int64_t> add(std::string_view key, int64_t delta) override {
    KILN_RETURN_IF_ERROR(store::check_key(key));
    std::lock_guard<std::mutex> lock(mu_);
    Result<int64_t> sum = table_.add(key, delta);
    if (sum.ok()) changed_.notify_all();
    return sum;
  }

  Result<std::string> compare_and_set(std::string_view key, std::string_view expected,
                                      std::string_view desired) override {
    KILN_RETURN_IF_ERROR(store::check_key(key));
    KILN_RETURN_IF_ERROR(store::check_value(key, expected));
    KILN_RETURN_IF_ERROR(store::check_value(key, desired));
    std::lock_guard<std::mutex> lock(mu_);
    Result<std::string> after = table_.compare_and_set(key, expected, desired);
    if (after.ok()) changed_.notify_all();
    return after;
  }

  Result<bool> remove(std::string_view key) override {
    KILN_RETURN_IF_ERROR(store::check_key(key));
    std::lock_guard<std::mutex> lock(mu_);
    return table_.remove(key);
  }

 private:
  static store::TableLimits default_limits() {
    const StoreServerOptions defaults;
    return {defaults.keys_max, defaults.bytes_max};
  }

  // Waits for `ready` until the deadline; returns its final value.
  template <typename Predicate>
  bool wait_until(std::unique_lock<std::mutex>& lock, Deadline deadline, Predicate ready) {
    if (deadline.infinite()) {
      changed_.wait(lock, ready);
      return true;
    }
    return changed_.wait_until(lock, deadline.to_steady(), ready);
  }

  std::mutex mu_;
  std::condition_variable changed_;  // notified after every mutation of table_
  store::Table table_;               // GUARDED_BY(mu_)
};

}  // namespace

std::unique_ptr<Store> make_memory_store() {
  return std::make_unique<MemoryStore>();
}

}  // namespace kiln::comm

// The state of a store and its atomic operations, without locking or waiting.
//
// MemoryStore wraps a Table in a mutex and a condition variable; StoreServer owns one on its
// event-loop thread and parks requests itself. Sharing it means both reject the same inputs with
// the same messages and agree on what ADD and CAS do.
//
// Invariants: size() <= keys_max; bytes() (keys plus values) <= bytes_max; every value was
// accepted by check_value(). Not thread-safe.
#ifndef KILN_COMM_STORE_TABLE_H_
#define KILN_COMM_STORE_TABLE_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <kiln/base/result.h>
#include <kiln/base/status.h>

namespace kiln::comm::store {

struct TableLimits {
  size_t keys_max = 0;
  size_t bytes_max = 0;  // keys and values together
};

class Table {
 public:
  explicit Table(TableLimits limits) : limits_(limits) {}

  // Sets `key`. kInvalidArgument naming the limit when a new key or a larger value would break
  // keys_max or bytes_max. REQUIRES: key and value pass check_key and check_value.
  Status set(std::string_view key, std::string_view value);

  // The value of `key`, or null. The pointer is valid until the next mutation.
  const std::string* find(std::string_view key) const;

  // See Store::add. kInvalidArgument when the value is not a decimal int64 or the sum overflows.
  Result<int64_t> add(std::string_view key, int64_t delta);

  // See Store::compare_and_set: returns the value after the call.
  Result<std::string> compare_and_set(std::string_view key, std::string_view expected,
                                      std::string_view desired);

  // Returns true if the key existed.
  bool remove(std::string_view key);

  // The keys of `keys` that are not set, in the given order.
  std::vector<std::string> missing(const std::vector<std::string>& keys) const;

  size_t size() const { return map_.size(); }
  size_t bytes() const { return bytes_; }

 private:
  TableLimits limits_;
  std::map<std::string, std::string, std::less<>> map_;
  size_t bytes_ = 0;
};

// The errors of a wait that ran out of time, shared so that every Store says the same thing.
// "store get: key 'rank/3/addr' not set after 5000 ms"
Status get_timeout_status(std::string_view key, int64_t timeout_ms);
// "store wait: 2 of 8 keys not set after 5000 ms: 'rank/3', 'rank/5'" (names the first few).
Status wait_timeout_status(const std::vector<std::string>& missing, size_t keys_total,
                           int64_t timeout_ms);

}  // namespace kiln::comm::store

#endif  // KILN_COMM_STORE_TABLE_H_

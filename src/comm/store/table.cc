// See table.h.
#include "comm/store/table.h"

#include <charconv>

#include "comm/store/protocol.h"

namespace kiln::comm::store {
namespace {

// A timeout names this many missing keys at most: enough to spot the absent ranks of a job,
// short enough that the message of a 4096-key wait stays one readable line.
constexpr size_t kMissingKeysNamedMax = 16;

}  // namespace

Status Table::set(std::string_view key, std::string_view value) {
  auto it = map_.find(key);
  if (it == map_.end()) {
    if (map_.size() >= limits_.keys_max) {
      return Status::invalid_argument("store: cannot add key " + quote(key) + ": the store holds " +
                                      std::to_string(map_.size()) + " keys, the limit (keys_max)");
    }
    if (bytes_ + key.size() + value.size() > limits_.bytes_max) {
      return Status::invalid_argument(
          "store: cannot add key " + quote(key) + ": the store would hold " +
          std::to_string(bytes_ + key.size() + value.size()) + " bytes, over the limit of " +
          std::to_string(limits_.bytes_max) + " (bytes_max)");
    }
    map_.emplace(std::string(key), std::string(value));
    bytes_ += key.size() + value.size();
    return Status();
  }
  const size_t next = bytes_ - it->second.size() + value.size();
  if (next > limits_.bytes_max) {
    return Status::invalid_argument(
        "store: cannot set key " + quote(key) + ": the store would hold " + std::to_string(next) +
        " bytes, over the limit of " + std::to_string(limits_.bytes_max) + " (bytes_max)");
  }
  it->second.assign(value);
  bytes_ = next;
  return Status();
}

const std::string* Table::find(std::string_view key) const {
  auto it = map_.find(key);
  return it == map_.end() ? nullptr : &it->second;
}

Result<int64_t> Table::add(std::string_view key, int64_t delta) {
  int64_t current = 0;
  if (const std::string* value = find(key)) {
    const char* end = value->data() + value->size();
    auto [ptr, ec] = std::from_chars(value->data(), end, current);
    if (value->empty() || ec != std::errc() || ptr != end) {
      return Status::invalid_argument("store add: key " + quote(key) + " holds " + quote(*value) +
                                      ", not a decimal integer");
    }
  }
  int64_t sum = 0;
  if (__builtin_add_overflow(current, delta, &sum)) {
    return Status::invalid_argument("store add: key " + quote(key) + ": " +
                                    std::to_string(current) + " + " + std::to_string(delta) +
                                    " overflows int64");
  }
  KILN_RETURN_IF_ERROR(set(key, std::to_string(sum)));
  return sum;
}

Result<std::string> Table::compare_and_set(std::string_view key, std::string_view expected,
                                           std::string_view desired) {
  const std::string* current = find(key);
  const std::string_view now = current == nullptr ? std::string_view() : std::string_view(*current);
  if (now != expected) return std::string(now);
  KILN_RETURN_IF_ERROR(set(key, desired));
  return std::string(desired);
}

bool Table::remove(std::string_view key) {
  auto it = map_.find(key);
  if (it == map_.end()) return false;
  bytes_ -= it->first.size() + it->second.size();
  map_.erase(it);
  return true;
}

std::vector<std::string> Table::missing(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  for (const std::string& key : keys) {
    if (find(key) == nullptr) out.push_back(key);
  }
  return out;
}

Status get_timeout_status(std::string_view key, int64_t timeout_ms) {
  return Status::timeout("store get: key " + quote(key) + " not set after " +
                         std::to_string(timeout_ms) + " ms");
}

Status wait_timeout_status(const std::vector<std::string>& missing, size_t keys_total,
                           int64_t timeout_ms) {
  std::string msg = "store wait: " + std::to_string(missing.size()) + " of " +
                    std::to_string(keys_total) + " keys not set after " +
                    std::to_string(timeout_ms) + " ms:";
  for (size_t i = 0; i < missing.size() && i < kMissingKeysNamedMax; ++i) {
    msg += (i == 0 ? " " : ", ") + quote(missing[i]);
  }
  if (missing.size() > kMissingKeysNamedMax) {
    msg += " and " + std::to_string(missing.size() - kMissingKeysNamedMax) + " more";
  }
  return Status::timeout(std::move(msg));
}

}  // namespace kiln::comm::store

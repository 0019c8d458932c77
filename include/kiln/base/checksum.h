// XXH3-64 checksums (libxxhash): what every on-disk and on-wire integrity check in Kiln uses.
//
// XXH3 is not cryptographic; it detects corruption (bit flips, truncation, torn writes), not
// tampering. Authentication uses HMAC with the job token instead (kiln_comm).
#ifndef KILN_BASE_CHECKSUM_H_
#define KILN_BASE_CHECKSUM_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace kiln {

// XXH3-64 of `bytes` with seed 0.
uint64_t xxh3(const void* data, size_t size_bytes);
inline uint64_t xxh3(std::string_view bytes) {
  return xxh3(bytes.data(), bytes.size());
}

// Sixteen lower-case hex digits, the form manifests and logs use.
std::string checksum_hex(uint64_t checksum);

// Incremental XXH3-64: feeding the same bytes in any split gives the same digest as xxh3().
// Not thread-safe; one per stream.
class Xxh3Hasher {
 public:
  Xxh3Hasher();
  ~Xxh3Hasher();
  Xxh3Hasher(const Xxh3Hasher&) = delete;
  Xxh3Hasher& operator=(const Xxh3Hasher&) = delete;

  void update(const void* data, size_t size_bytes);
  void update(std::string_view bytes) { update(bytes.data(), bytes.size()); }
  // The digest of everything fed so far; the hasher may keep being fed afterwards.
  uint64_t digest() const;
  void reset();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace kiln

#endif  // KILN_BASE_CHECKSUM_H_

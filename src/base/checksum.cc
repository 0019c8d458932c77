// XXH3-64 through libxxhash. See include/kiln/base/checksum.h.
#include <kiln/base/check.h>
#include <kiln/base/checksum.h>

#include <xxhash.h>

#include <cstdio>

namespace kiln {

struct Xxh3Hasher::State {
  XXH3_state_t* xxh = nullptr;
};

uint64_t xxh3(const void* data, size_t size_bytes) {
  return XXH3_64bits(data, size_bytes);
}

std::string checksum_hex(uint64_t checksum) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(checksum));
  return buf;
}

Xxh3Hasher::Xxh3Hasher() : state_(std::make_unique<State>()) {
  state_->xxh = XXH3_createState();
  KILN_CHECK(state_->xxh != nullptr) << "XXH3_createState: out of memory";
  reset();
}

Xxh3Hasher::~Xxh3Hasher() {
  XXH3_freeState(state_->xxh);
}

void Xxh3Hasher::update(const void* data, size_t size_bytes) {
  // XXH3_64bits_update only fails on a null state, which the constructor rules out.
  const XXH_errorcode rc = XXH3_64bits_update(state_->xxh, data, size_bytes);
  KILN_CHECK(rc == XXH_OK);
}

uint64_t Xxh3Hasher::digest() const {
  return XXH3_64bits_digest(state_->xxh);
}

void Xxh3Hasher::reset() {
  const XXH_errorcode rc = XXH3_64bits_reset(state_->xxh);
  KILN_CHECK(rc == XXH_OK);
}

}  // namespace kiln

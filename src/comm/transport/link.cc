// See link.h.
#include "comm/transport/link.h"

#include <cstdio>

namespace kiln::comm {
namespace {

std::string hex(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "0x%08x", v);
  return buf;
}

}  // namespace

Status message_mismatch(uint64_t message, const std::string& peer, size_t got_bytes,
                        uint32_t got_tag, size_t want_bytes, uint32_t want_tag) {
  return Status::aborted("message " + std::to_string(message) + " from " + peer + " has " +
                         std::to_string(got_bytes) + " bytes and tag " + hex(got_tag) +
                         ", expected " + std::to_string(want_bytes) + " bytes and tag " +
                         hex(want_tag) +
                         ": the ranks are not running the same collectives in the same order");
}

}  // namespace kiln::comm

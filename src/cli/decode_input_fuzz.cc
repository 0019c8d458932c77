// libFuzzer target for `kiln decode`'s input reader (parse_token_ids), built by kiln_fuzz_target
// (KilnFuzz.cmake).
//
// Whatever parses must print back (as "[a,b,...]") to text that parses to the same ids, and must
// hold no more ids than the input has bytes / 2 + 1 (the memory bound). Refusals must be
// kInvalidArgument naming stdin or the id. A violation is a KILN_CHECK failure, recorded as a
// crash; so is a sanitizer report.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <kiln/base/check.h>

#include "cli/decode_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  kiln::Result<std::vector<uint32_t>> ids = kiln::cli::parse_token_ids(text);
  if (!ids.ok()) {
    KILN_CHECK(ids.status().is_invalid_argument()) << ids.status().to_string();
    return 0;
  }
  KILN_CHECK(ids->size() <= size / 2 + 1) << ids->size() << " ids from " << size << " bytes";
  std::string printed = "[";
  for (size_t i = 0; i < ids->size(); ++i)
    printed += (i == 0 ? "" : ",") + std::to_string((*ids)[i]);
  printed += "]";
  kiln::Result<std::vector<uint32_t>> again = kiln::cli::parse_token_ids(printed);
  KILN_CHECK(again.ok() && *again == *ids) << "ids do not survive printing: " << printed;
  return 0;
}

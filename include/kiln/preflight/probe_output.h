// Reading what a preflight probe printed (`kiln link-check`, `kiln ops-check --json`, `kiln train
// --json`): its JSON lines, and the last line of its error output for a person.
#ifndef KILN_PREFLIGHT_PROBE_OUTPUT_H_
#define KILN_PREFLIGHT_PROBE_OUTPUT_H_

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace kiln::preflight {

// The JSON objects of `out`, one per line, in order; other lines are left out.
std::vector<nlohmann::json> json_lines(const std::string& out);

// The last non-empty line of `text` (trailing spaces and newlines dropped); "(no output)" when
// there is none.
std::string last_line(const std::string& text);

}  // namespace kiln::preflight

#endif  // KILN_PREFLIGHT_PROBE_OUTPUT_H_

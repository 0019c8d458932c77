// Reading a probe's output (kiln/preflight/probe_output.h).
#include <kiln/preflight/probe_output.h>

namespace kiln::preflight {

std::vector<nlohmann::json> json_lines(const std::string& out) {
  std::vector<nlohmann::json> lines;
  size_t start = 0;
  while (start < out.size()) {
    size_t end = out.find('\n', start);
    if (end == std::string::npos) end = out.size();
    nlohmann::json line = nlohmann::json::parse(out.substr(start, end - start), nullptr, false);
    start = end + 1;
    if (line.is_object()) lines.push_back(std::move(line));
  }
  return lines;
}

std::string last_line(const std::string& text) {
  const size_t end = text.find_last_not_of("\n ");
  if (end == std::string::npos) return "(no output)";
  const size_t newline = text.rfind('\n', end);
  const size_t begin = newline == std::string::npos ? 0 : newline + 1;
  return text.substr(begin, end + 1 - begin);
}

}  // namespace kiln::preflight

// See proc_files.h.
#include "preflight/proc_files.h"

#include <charconv>
#include <fstream>
#include <sstream>

namespace kiln::preflight {

std::optional<std::string> read_trimmed(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  std::string s = text.str();
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\t'))
    s.pop_back();
  return s;
}

std::optional<int64_t> read_int(const std::string& path) {
  std::optional<std::string> text = read_trimmed(path);
  if (!text) return std::nullopt;
  int64_t value = 0;
  const char* end = text->data() + text->size();
  auto [ptr, ec] = std::from_chars(text->data(), end, value);
  if (ec != std::errc() || ptr != end) return std::nullopt;
  return value;
}

std::map<std::string, std::string> read_key_values(const std::string& path) {
  std::map<std::string, std::string> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    const size_t eq = line.find('=');
    if (eq == std::string::npos || line[0] == '#') continue;
    std::string value = line.substr(eq + 1);
    if (value.size() >= 2 && value.front() == '"' && value.back() == '"') {
      value = value.substr(1, value.size() - 2);
    }
    out[line.substr(0, eq)] = value;
  }
  return out;
}

std::optional<int64_t> meminfo_bytes(const std::string& field) {
  std::ifstream in("/proc/meminfo");
  std::string key;
  while (in >> key) {
    if (key == field + ":") {
      int64_t value = 0;
      std::string unit;
      in >> value >> unit;
      return unit == "kB" ? value * 1024 : value;
    }
    in.ignore(1 << 16, '\n');
  }
  return std::nullopt;
}

std::optional<std::string> selected_choice(const std::string& path) {
  std::optional<std::string> text = read_trimmed(path);
  if (!text) return std::nullopt;
  const size_t open = text->find('[');
  const size_t close = text->find(']');
  if (open == std::string::npos || close == std::string::npos || close < open) return text;
  return text->substr(open + 1, close - open - 1);
}

}  // namespace kiln::preflight

// Strict YAML config reading. See include/kiln/base/config.h for the contract.
//
// yaml-cpp throws on syntax errors and on failed conversions; both are caught here and turned
// into Status. Scalars are converted by hand (std::from_chars) instead of YAML::Node::as<T>(),
// because as<T>() accepts things the strict schema does not (yes/no booleans, "0x10").
#include <kiln/base/config.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <set>

namespace kiln {
namespace {

// A problem found while reading, kept with its position so finish() can sort by line.
struct ConfigError {
  int line = 0;    // 1-based
  int column = 0;  // 1-based
  std::string text;
};

std::string join_path(const std::string& parent, std::string_view key) {
  return parent.empty() ? std::string(key) : parent + "." + std::string(key);
}

// Levenshtein distance, for "did you mean" hints on unknown keys.
size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j)
    row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// Describes what a node is, for "expected X, got Y" messages.
std::string describe(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Null: return "null";
    case YAML::NodeType::Sequence: return "a sequence";
    case YAML::NodeType::Map: return "a mapping";
    case YAML::NodeType::Scalar: {
      // A message quotes at most this much of a scalar: enough to find it, never a whole file.
      constexpr size_t kQuoteBytesMax = 64;
      const std::string& text = node.Scalar();
      const std::string quoted =
          text.size() > kQuoteBytesMax ? text.substr(0, kQuoteBytesMax) + "..." : text;
      if (node.Tag() == "!") return "the string \"" + quoted + "\"";
      return "'" + quoted + "'";
    }
    case YAML::NodeType::Undefined: break;
  }
  return "nothing";
}

bool is_quoted(const YAML::Node& node) {
  return node.Tag() == "!";
}

bool parse_strict_int(const std::string& text, int64_t* out) {
  std::string_view digits = text;
  if (!digits.empty() && digits.front() == '+') digits.remove_prefix(1);
  if (digits.empty()) return false;
  const char* end = digits.data() + digits.size();
  auto [ptr, ec] = std::from_chars(digits.data(), end, *out);
  return ec == std::errc() && ptr == end;
}

bool parse_strict_double(const std::string& text, double* out) {
  std::string_view digits = text;
  if (!digits.empty() && digits.front() == '+') digits.remove_prefix(1);
  if (digits.empty()) return false;
  const char* end = digits.data() + digits.size();
  auto [ptr, ec] = std::from_chars(digits.data(), end, *out);
  return ec == std::errc() && ptr == end && std::isfinite(*out);
}

// %g: six significant digits, so 1e308 prints as "1e+308", never as its 309 decimal digits.
std::string format_number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

// Closes a file descriptor when it goes out of scope.
class FdCloser {
 public:
  explicit FdCloser(int fd) : fd_(fd) {}
  ~FdCloser() { ::close(fd_); }
  FdCloser(const FdCloser&) = delete;
  FdCloser& operator=(const FdCloser&) = delete;

 private:
  int fd_;
};

// Reads the config file at `path`: a regular file of at most kConfigBytesMax bytes. It is opened
// O_NONBLOCK so that a FIFO cannot block the open, and refused after fstat unless it is a regular
// file (a directory, a FIFO, /dev/zero); the read stops past the bound, so a file that grows
// while being read cannot take more memory either.
Result<std::string> read_config_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) return Status::not_found("config file " + path + ": no such file");
    return Status::io_error("config file " + path + ": " + std::strerror(err));
  }
  FdCloser closer(fd);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    return Status::io_error("config file " + path + ": fstat: " + std::strerror(errno));
  }
  if (S_ISDIR(st.st_mode)) {
    return Status::invalid_argument("config file " + path + ": is a directory, not a file");
  }
  if (!S_ISREG(st.st_mode)) {
    return Status::invalid_argument("config file " + path +
                                    ": not a regular file (a FIFO, socket or device); a config "
                                    "must be a file");
  }
  if (static_cast<uint64_t>(st.st_size) > kConfigBytesMax) {
    return Status::invalid_argument("config file " + path + ": " + std::to_string(st.st_size) +
                                    " bytes, more than the " + std::to_string(kConfigBytesMax) +
                                    " a config may have");
  }
  std::string text(kConfigBytesMax + 1, '\0');
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::read(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::io_error("config file " + path + ": read: " + std::strerror(errno));
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  if (done > kConfigBytesMax) {
    return Status::invalid_argument("config file " + path + ": grew past the " +
                                    std::to_string(kConfigBytesMax) +
                                    " bytes a config may have while being read");
  }
  text.resize(done);
  return text;
}

}  // namespace

struct ConfigDocument::State {
  struct Mapping {
    YAML::Node node;                           // a Map, or Undefined for an absent optional section
    std::string path;                          // dotted path from the root
    YAML::Mark mark;                           // where the mapping starts (for missing-key errors)
    std::set<std::string, std::less<>> known;  // keys some accessor asked for
  };
  std::string source_name;
  YAML::Node root;
  std::vector<Mapping> mappings;  // index 0 is the root
  std::vector<ConfigError> errors;

  void add_error(const YAML::Mark& mark, const std::string& path, const std::string& what) {
    ConfigError error;
    error.line = mark.line + 1;
    error.column = mark.column + 1;
    error.text = source_name + ":" + std::to_string(error.line) + ":" +
                 std::to_string(error.column) + ": key '" + path + "': " + what;
    errors.push_back(std::move(error));
  }

  // Looks up `key` in mapping `index`, marking it known. Returns an Undefined node when absent,
  // after recording an error if it was required.
  YAML::Node lookup(int index, std::string_view key, Presence presence) {
    Mapping& m = mappings[index];
    m.known.emplace(key);
    if (!m.node.IsMap()) return YAML::Node(YAML::NodeType::Undefined);
    for (auto it = m.node.begin(); it != m.node.end(); ++it) {
      if (it->first.IsScalar() && it->first.Scalar() == key) return it->second;
    }
    if (presence == kRequired) {
      add_error(m.mark, join_path(m.path, key), "required key is missing");
    }
    return YAML::Node(YAML::NodeType::Undefined);
  }
};

Result<ConfigDocument> ConfigDocument::parse(std::string_view text, std::string source_name) {
  auto state = std::make_shared<State>();
  state->source_name = std::move(source_name);
  if (text.size() > kConfigBytesMax) {
    return Status::invalid_argument(state->source_name + ": " + std::to_string(text.size()) +
                                    " bytes, more than the " + std::to_string(kConfigBytesMax) +
                                    " a config may have");
  }
  try {
    state->root = YAML::Load(std::string(text));
  } catch (const YAML::DeepRecursion& e) {
    // yaml-cpp stops at a fixed depth (DepthGuard's 2000) but says only "bad file".
    return Status::invalid_argument(state->source_name + ":" + std::to_string(e.mark.line + 1) +
                                    ":" + std::to_string(e.mark.column + 1) +
                                    ": YAML nested too deeply (yaml-cpp stops at a recursion "
                                    "depth of 2000; a config needs a handful of levels)");
  } catch (const YAML::Exception& e) {
    return Status::invalid_argument(state->source_name + ":" + std::to_string(e.mark.line + 1) +
                                    ":" + std::to_string(e.mark.column + 1) +
                                    ": YAML syntax error: " + e.msg);
  }
  State::Mapping root;
  root.mark = state->root.Mark();
  if (state->root.IsNull() || !state->root.IsDefined()) {
    root.node = YAML::Node(YAML::NodeType::Map);  // an empty file is an empty mapping
    root.mark = YAML::Mark();
  } else if (state->root.IsMap()) {
    root.node = state->root;
  } else {
    return Status::invalid_argument(
        state->source_name + ":" + std::to_string(state->root.Mark().line + 1) +
        ": expected a mapping of keys at the top level, got " + describe(state->root));
  }
  state->mappings.push_back(std::move(root));
  return ConfigDocument(std::move(state));
}

Result<ConfigDocument> ConfigDocument::load_file(const std::string& path) {
  KILN_ASSIGN_OR_RETURN(const std::string text, read_config_file(path));
  return parse(text, path);
}

ConfigReader ConfigDocument::root() const {
  return ConfigReader(state_, 0);
}

const std::string& ConfigDocument::source_name() const {
  return state_->source_name;
}

Status ConfigDocument::finish() const {
  std::vector<ConfigError> errors = state_->errors;
  for (const State::Mapping& m : state_->mappings) {
    if (!m.node.IsMap()) continue;
    std::set<std::string, std::less<>> seen;
    for (auto it = m.node.begin(); it != m.node.end(); ++it) {
      // A copy: yaml-cpp iterators hand out proxies, so a reference would dangle.
      const YAML::Node key_node = it->first;
      const std::string key = key_node.IsScalar() ? key_node.Scalar() : "?";
      const std::string path = join_path(m.path, key);
      auto add = [&](const std::string& what) {
        ConfigError error;
        error.line = key_node.Mark().line + 1;
        error.column = key_node.Mark().column + 1;
        error.text = state_->source_name + ":" + std::to_string(error.line) + ":" +
                     std::to_string(error.column) + ": key '" + path + "': " + what;
        errors.push_back(std::move(error));
      };
      if (!seen.insert(key).second) {
        add("duplicate key");
        continue;
      }
      if (m.known.count(key) != 0) continue;
      std::string what = "unknown key";
      std::string best;
      size_t best_distance = 3;  // suggest only close matches (a typo, not a different word)
      for (const std::string& candidate : m.known) {
        const size_t d = edit_distance(key, candidate);
        if (d < best_distance) {
          best_distance = d;
          best = candidate;
        }
      }
      if (!best.empty()) what += "; did you mean '" + best + "'?";
      std::string known_list;
      for (const std::string& candidate : m.known) {
        known_list += (known_list.empty() ? "" : ", ") + candidate;
      }
      what += known_list.empty() ? " (this mapping takes no keys)"
                                 : " (known keys: " + known_list + ")";
      add(what);
    }
  }
  if (errors.empty()) return Status();
  std::stable_sort(errors.begin(), errors.end(), [](const ConfigError& a, const ConfigError& b) {
    return a.line != b.line ? a.line < b.line : a.column < b.column;
  });
  std::string message;
  for (const ConfigError& e : errors)
    message += (message.empty() ? "" : "\n") + e.text;
  return Status::invalid_argument(message);
}

bool ConfigReader::has(std::string_view key) const {
  const auto& m = state_->mappings[mapping_index_];
  if (!m.node.IsMap()) return false;
  for (auto it = m.node.begin(); it != m.node.end(); ++it) {
    if (it->first.IsScalar() && it->first.Scalar() == key) return true;
  }
  return false;
}

std::vector<std::string> ConfigReader::keys() const {
  std::vector<std::string> keys;
  const auto& m = state_->mappings[mapping_index_];
  if (!m.node.IsMap()) return keys;
  for (auto it = m.node.begin(); it != m.node.end(); ++it) {
    if (it->first.IsScalar()) keys.push_back(it->first.Scalar());
  }
  return keys;
}

bool ConfigReader::is_mapping(std::string_view key) const {
  const auto& m = state_->mappings[mapping_index_];
  if (!m.node.IsMap()) return false;
  for (auto it = m.node.begin(); it != m.node.end(); ++it) {
    if (it->first.IsScalar() && it->first.Scalar() == key) return it->second.IsMap();
  }
  return false;
}

void ConfigReader::report(std::string_view key, std::string_view what) {
  const auto& m = state_->mappings[mapping_index_];
  YAML::Mark mark = m.mark;
  if (m.node.IsMap()) {
    for (auto it = m.node.begin(); it != m.node.end(); ++it) {
      if (it->first.IsScalar() && it->first.Scalar() == key) {
        mark = it->second.Mark();
        break;
      }
    }
  }
  state_->add_error(mark, join_path(m.path, key), std::string(what));
}

const std::string& ConfigReader::path() const {
  return state_->mappings[mapping_index_].path;
}

bool ConfigReader::read_int_impl(std::string_view key, int64_t* out, int64_t min, int64_t max,
                                 Presence presence) {
  YAML::Node node = state_->lookup(mapping_index_, key, presence);
  if (!node.IsDefined()) return false;
  const std::string path = join_path(this->path(), key);
  int64_t value = 0;
  if (!node.IsScalar() || is_quoted(node) || !parse_strict_int(node.Scalar(), &value)) {
    state_->add_error(node.Mark(), path, "expected an integer, got " + describe(node));
    return false;
  }
  if (value < min || value > max) {
    state_->add_error(node.Mark(), path,
                      std::to_string(value) + " is out of range [" + std::to_string(min) + ", " +
                          std::to_string(max) + "]");
    return false;
  }
  *out = value;
  return true;
}

ConfigReader& ConfigReader::read_double(std::string_view key, double* out, double min, double max,
                                        Presence presence) {
  YAML::Node node = state_->lookup(mapping_index_, key, presence);
  if (!node.IsDefined()) return *this;
  const std::string path = join_path(this->path(), key);
  double value = 0;
  if (!node.IsScalar() || is_quoted(node) || !parse_strict_double(node.Scalar(), &value)) {
    state_->add_error(node.Mark(), path, "expected a finite number, got " + describe(node));
    return *this;
  }
  if (value < min || value > max) {
    state_->add_error(node.Mark(), path,
                      format_number(value) + " is out of range [" + format_number(min) + ", " +
                          format_number(max) + "]");
    return *this;
  }
  *out = value;
  return *this;
}

ConfigReader& ConfigReader::read_bool(std::string_view key, bool* out, Presence presence) {
  YAML::Node node = state_->lookup(mapping_index_, key, presence);
  if (!node.IsDefined()) return *this;
  const std::string path = join_path(this->path(), key);
  if (node.IsScalar() && !is_quoted(node)) {
    const std::string& s = node.Scalar();
    if (s == "true" || s == "True" || s == "TRUE") {
      *out = true;
      return *this;
    }
    if (s == "false" || s == "False" || s == "FALSE") {
      *out = false;
      return *this;
    }
  }
  state_->add_error(node.Mark(), path, "expected true or false, got " + describe(node));
  return *this;
}

ConfigReader& ConfigReader::read_string(std::string_view key, std::string* out, Presence presence) {
  YAML::Node node = state_->lookup(mapping_index_, key, presence);
  if (!node.IsDefined()) return *this;
  if (!node.IsScalar()) {
    state_->add_error(node.Mark(), join_path(path(), key),
                      "expected a string, got " + describe(node));
    return *this;
  }
  *out = node.Scalar();
  return *this;
}

ConfigReader& ConfigReader::read_enum(std::string_view key, std::string* out,
                                      std::initializer_list<std::string_view> allowed,
                                      Presence presence) {
  YAML::Node node = state_->lookup(mapping_index_, key, presence);
  if (!node.IsDefined()) return *this;
  std::string choices;
  for (std::string_view a : allowed)
    choices += (choices.empty() ? "" : ", ") + std::string(a);
  if (node.IsScalar()) {
    for (std::string_view a : allowed) {
      if (node.Scalar() == a) {
        *out = node.Scalar();
        return *this;
      }
    }
  }
  state_->add_error(node.Mark(), join_path(path(), key),
                    "expected one of " + choices + ", got " + describe(node));
  return *this;
}

ConfigReader& ConfigReader::read_string_list(std::string_view key, std::vector<std::string>* out,
                                             Presence presence) {
  YAML::Node node = state_->lookup(mapping_index_, key, presence);
  if (!node.IsDefined()) return *this;
  const std::string path = join_path(this->path(), key);
  if (!node.IsSequence()) {
    state_->add_error(node.Mark(), path, "expected a sequence of strings, got " + describe(node));
    return *this;
  }
  std::vector<std::string> values;
  for (size_t i = 0; i < node.size(); ++i) {
    const YAML::Node item = node[i];
    if (!item.IsScalar()) {
      state_->add_error(item.Mark(), path + "[" + std::to_string(i) + "]",
                        "expected a string, got " + describe(item));
      return *this;
    }
    values.push_back(item.Scalar());
  }
  *out = std::move(values);
  return *this;
}

ConfigReader& ConfigReader::read_string_map(std::string_view key,
                                            std::map<std::string, std::string>* out,
                                            Presence presence, const KeyCheck& check_key) {
  YAML::Node node = state_->lookup(mapping_index_, key, presence);
  if (!node.IsDefined()) return *this;
  const std::string path = join_path(this->path(), key);
  if (!node.IsMap()) {
    state_->add_error(node.Mark(), path, "expected a mapping of strings, got " + describe(node));
    return *this;
  }
  // Every bad entry is reported, not only the first; the output is set only when none is bad.
  std::map<std::string, std::string> values;
  bool all_good = true;
  for (auto it = node.begin(); it != node.end(); ++it) {
    const std::string item_path = join_path(path, it->first.IsScalar() ? it->first.Scalar() : "?");
    if (!it->first.IsScalar() || !it->second.IsScalar()) {
      state_->add_error(it->second.Mark(), item_path,
                        "expected a string value, got " + describe(it->second));
      all_good = false;
      continue;
    }
    if (check_key) {
      const std::string complaint = check_key(it->first.Scalar());
      if (!complaint.empty()) {
        state_->add_error(it->first.Mark(), item_path, complaint);
        all_good = false;
        continue;
      }
    }
    if (!values.emplace(it->first.Scalar(), it->second.Scalar()).second) {
      state_->add_error(it->first.Mark(), item_path, "duplicate key");
      all_good = false;
    }
  }
  if (all_good) *out = std::move(values);
  return *this;
}

ConfigReader ConfigReader::section(std::string_view key, Presence presence) {
  YAML::Node node = state_->lookup(mapping_index_, key, presence);
  ConfigDocument::State::Mapping section;
  section.path = join_path(path(), key);
  section.mark = node.IsDefined() ? node.Mark() : state_->mappings[mapping_index_].mark;
  if (node.IsDefined()) {
    if (node.IsMap()) {
      section.node = node;
    } else {
      state_->add_error(node.Mark(), section.path, "expected a mapping, got " + describe(node));
    }
  }
  state_->mappings.push_back(std::move(section));
  return ConfigReader(state_, static_cast<int>(state_->mappings.size() - 1));
}

}  // namespace kiln

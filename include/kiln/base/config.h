// Strict configuration loading from YAML (yaml-cpp underneath).
//
// A config file is read through a ConfigReader that names every key it accepts, with its type and
// range. Whatever the reader did not ask for is an error, as is a wrong type, an out-of-range
// value, a duplicate key or a missing required key. Every error names the file, the line and
// column, and the full key path:
//
//   configs/tiny.yaml:4:3: key 'model.n_layr': unknown key; did you mean 'n_layer'?
//   configs/tiny.yaml:5:12: key 'model.n_head': expected an integer, got the string 'six'
//   configs/tiny.yaml:9:8: key 'optim.lr': 5 is out of range [0, 1]
//
// Usage:
//   KILN_ASSIGN_OR_RETURN(ConfigDocument doc, ConfigDocument::load_file(path));
//   ConfigReader root = doc.root();
//   root.read_int("port", &options.port, 0, 65535);
//   ConfigReader model = root.section("model", kRequired);
//   model.read_int("n_layer", &options.n_layer, 1, 1024, kRequired);
//   KILN_RETURN_IF_ERROR(doc.finish());   // reports every problem found, sorted by line
//
// Values take YAML 1.2's core schema, strictly: integers are plain decimal scalars, booleans are
// true/false, and a quoted scalar is always a string ("3" is not an integer). An absent optional
// key leaves the output untouched, so initialise outputs with their defaults.
//
// Not thread-safe: a document and its readers belong to one thread.
#ifndef KILN_BASE_CONFIG_H_
#define KILN_BASE_CONFIG_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <kiln/base/result.h>
#include <kiln/base/status.h>

namespace kiln {

// The largest config file or text accepted. Real configs are a few KiB; yaml-cpp spends a few
// hundred bytes a node, so 1 MiB (at most ~500,000 nodes) keeps a hostile file to a few hundred
// MB, where an unbounded one (`kiln train /dev/zero`) read until bad_alloc.
inline constexpr size_t kConfigBytesMax = size_t{1} << 20;

enum class Presence { kOptional, kRequired };
inline constexpr Presence kOptional = Presence::kOptional;
inline constexpr Presence kRequired = Presence::kRequired;

class ConfigReader;

// T's range clamped to int64_t's (uint64_t values above INT64_MAX are not accepted).
template <typename T>
constexpr int64_t lowest_as_int64() {
  return std::is_signed_v<T> ? static_cast<int64_t>(std::numeric_limits<T>::min()) : 0;
}
template <typename T>
constexpr int64_t highest_as_int64() {
  return static_cast<uint64_t>(std::numeric_limits<T>::max()) >
                 static_cast<uint64_t>(std::numeric_limits<int64_t>::max())
             ? std::numeric_limits<int64_t>::max()
             : static_cast<int64_t>(std::numeric_limits<T>::max());
}

// A parsed YAML document and the errors found while reading it. Cheap to copy (shared state).
class ConfigDocument {
 public:
  // Reads and parses `path`. kNotFound / kIoError name the path; kInvalidArgument names it when
  // it is not a regular file (a directory, a FIFO, a device) or is over kConfigBytesMax, and
  // names path, line and column for a YAML syntax error or nesting too deep for yaml-cpp.
  static Result<ConfigDocument> load_file(const std::string& path);
  // Parses `text` (at most kConfigBytesMax); `source_name` stands for the file name in errors.
  static Result<ConfigDocument> parse(std::string_view text, std::string source_name);

  // The top-level mapping. An empty document reads as an empty mapping.
  ConfigReader root() const;

  // OK iff no reader found a problem and no mapping holds a key nobody asked for.
  // Call once, after every key has been read. kInvalidArgument lists every problem, one per line.
  Status finish() const;

  const std::string& source_name() const;

  struct State;  // private; defined in config.cc

 private:
  explicit ConfigDocument(std::shared_ptr<State> state) : state_(std::move(state)) {}
  std::shared_ptr<State> state_;
};

// A view of one YAML mapping inside a ConfigDocument. Each accessor records its key as known.
class ConfigReader {
 public:
  // Integers: any integral T; the range is inclusive and checked after parsing.
  template <typename T>
  ConfigReader& read_int(std::string_view key, T* out, int64_t min = lowest_as_int64<T>(),
                         int64_t max = highest_as_int64<T>(), Presence presence = kOptional) {
    static_assert(std::is_integral_v<T> && !std::is_same_v<T, bool>, "read_int() is for integers");
    // The range must fit T, or the cast below could wrap.
    if (min < lowest_as_int64<T>()) min = lowest_as_int64<T>();
    if (max > highest_as_int64<T>()) max = highest_as_int64<T>();
    int64_t value = static_cast<int64_t>(*out);
    if (read_int_impl(key, &value, min, max, presence)) *out = static_cast<T>(value);
    return *this;
  }
  ConfigReader& read_double(std::string_view key, double* out, double min, double max,
                            Presence presence = kOptional);
  ConfigReader& read_bool(std::string_view key, bool* out, Presence presence = kOptional);
  // Any non-null scalar.
  ConfigReader& read_string(std::string_view key, std::string* out, Presence presence = kOptional);
  // A scalar that must be one of `allowed`.
  ConfigReader& read_enum(std::string_view key, std::string* out,
                          std::initializer_list<std::string_view> allowed,
                          Presence presence = kOptional);
  // A sequence of scalars.
  ConfigReader& read_string_list(std::string_view key, std::vector<std::string>* out,
                                 Presence presence = kOptional);
  // Checks one key of a read_string_map; returns "" if it is acceptable, else what is wrong with
  // it.
  using KeyCheck = std::function<std::string(const std::string& key)>;

  // A mapping of scalar keys to scalar values (labels, environment variables). A non-null
  // `check_key` vets every key; its complaint is reported at that key's line. Every bad entry is
  // reported; `out` is set only when there is none.
  ConfigReader& read_string_map(std::string_view key, std::map<std::string, std::string>* out,
                                Presence presence = kOptional, const KeyCheck& check_key = nullptr);

  // A nested mapping. When absent (and optional) the returned reader is empty: its accessors
  // leave their outputs untouched.
  ConfigReader section(std::string_view key, Presence presence = kOptional);

  // True if `key` is present (does not mark it as known).
  bool has(std::string_view key) const;

  // For mappings whose keys are data rather than a fixed schema (a job's environment variables),
  // and whose values may take one of two forms (a string, or a mapping of options):
  // The scalar keys of this mapping in document order; empty for an absent section. Does not
  // mark them as known: the caller reads each one with an accessor above.
  std::vector<std::string> keys() const;
  // True if `key` is present and its value is a mapping (does not mark it as known).
  bool is_mapping(std::string_view key) const;
  // Records a problem the caller found itself (a cross-field rule, a value with units it parses)
  // as the accessors do: at the line of `key`'s value, or of this mapping when `key` is absent,
  // and reported by finish(). Does not mark `key` as known.
  void report(std::string_view key, std::string_view what);

  // The dotted path of this mapping ("" for the root, "model", "model.attention").
  const std::string& path() const;

 private:
  friend class ConfigDocument;
  ConfigReader(std::shared_ptr<ConfigDocument::State> state, int mapping_index)
      : state_(std::move(state)), mapping_index_(mapping_index) {}
  bool read_int_impl(std::string_view key, int64_t* out, int64_t min, int64_t max,
                     Presence presence);

  std::shared_ptr<ConfigDocument::State> state_;
  int mapping_index_;  // index into State::mappings; -1 for an absent optional section
};

}  // namespace kiln

#endif  // KILN_BASE_CONFIG_H_

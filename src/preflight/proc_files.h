// Small readers for /proc, /sys and /etc files, shared by the fact and metric collectors.
// Each returns std::nullopt when the file is absent or does not parse, never throws.
#ifndef KILN_PREFLIGHT_PROC_FILES_H_
#define KILN_PREFLIGHT_PROC_FILES_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace kiln::preflight {

// The whole file with trailing whitespace removed.
std::optional<std::string> read_trimmed(const std::string& path);

// The file's content as a decimal integer.
std::optional<int64_t> read_int(const std::string& path);

// KEY=value lines (os-release style); surrounding double quotes are removed from values.
std::map<std::string, std::string> read_key_values(const std::string& path);

// A /proc/meminfo field in bytes ("MemAvailable" -> 12345678848).
std::optional<int64_t> meminfo_bytes(const std::string& field);

// The bracketed choice of a /sys multiple-choice file: "always [madvise] never" -> "madvise".
std::optional<std::string> selected_choice(const std::string& path);

}  // namespace kiln::preflight

#endif  // KILN_PREFLIGHT_PROC_FILES_H_

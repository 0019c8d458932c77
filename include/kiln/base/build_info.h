// What this Kiln binary is: its version, the commit it was built from, how it was built.
// These feed `kiln version`, `kiln facts` and the stack-consistency check.
#ifndef KILN_BASE_BUILD_INFO_H_
#define KILN_BASE_BUILD_INFO_H_

#include <string>
#include <string_view>

namespace kiln {

struct BuildInfo {
  std::string_view version;     // "0.1.0", from the CMake project version
  std::string_view git_commit;  // full commit hash, or "unknown" outside a git checkout
  bool git_dirty;               // the tree had uncommitted changes when built
  std::string_view build_type;  // CMAKE_BUILD_TYPE: Release, RelWithDebInfo, Debug
  std::string_view compiler;    // "GNU 12.2.0"
  std::string_view sanitizer;   // "", "address" or "thread"
};

// Filled in at build time (the commit is re-read on every build, not only at configure time).
const BuildInfo& build_info();

// The GNU build-id note of the running executable as hex: identical binaries have identical ids,
// so two nodes with the same id run the same bits. Empty if the binary has no such note.
std::string executable_build_id();

}  // namespace kiln

#endif  // KILN_BASE_BUILD_INFO_H_

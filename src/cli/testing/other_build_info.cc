// The build info of kiln-other-build (src/cli/CMakeLists.txt): the same code as `kiln`, another
// version. Overrides the weak definition generated into kiln_base.
#include <kiln/base/build_info.h>

namespace kiln {

const BuildInfo& build_info() {
  static const BuildInfo info{KILN_OTHER_VERSION,    "unknown",           false,
                              KILN_OTHER_BUILD_TYPE, KILN_OTHER_COMPILER, ""};
  return info;
}

}  // namespace kiln

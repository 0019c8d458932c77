// Library versions and loaded shared objects. See fact_sections.h.
#include <fmt/core.h>
#include <gnu/libc-version.h>
#include <link.h>
#include <openssl/crypto.h>
#include <spdlog/version.h>
#include <xxhash.h>
#include <CLI/Version.hpp>
#include <nlohmann/json.hpp>

#include <climits>
#include <cstdlib>
#include <string>

#include "preflight/fact_sections.h"

namespace kiln::preflight {
namespace {

int collect_object(dl_phdr_info* info, size_t /*size*/, void* data) {
  auto* out = static_cast<nlohmann::ordered_json*>(data);
  const std::string name = info->dlpi_name == nullptr ? "" : info->dlpi_name;
  if (name.empty() || name.find("linux-vdso") != std::string::npos) return 0;
  const std::string base = name.substr(name.rfind('/') + 1);
  // Name-service modules load on a process's first host or user lookup: whether they are there
  // says what the process did, not what the node runs.
  if (base.rfind("libnss_", 0) == 0 || base.rfind("libresolv", 0) == 0) return 0;
  char resolved[PATH_MAX];
  if (realpath(name.c_str(), resolved) != nullptr) {
    (*out)[base] = resolved;
  } else {
    (*out)[base] = name;
  }
  return 0;
}

// The version in a resolved shared-object path: ".../libyaml-cpp.so.0.7.0" -> "0.7.0".
nlohmann::ordered_json version_from_shared_object(const nlohmann::ordered_json& shared_objects,
                                                  const std::string& prefix) {
  for (const auto& [soname, path_json] : shared_objects.items()) {
    if (soname.rfind(prefix + ".so", 0) != 0) continue;
    const std::string path = path_json.get<std::string>();
    const std::string file = path.substr(path.rfind('/') + 1);
    const size_t so = file.find(".so.");
    if (so != std::string::npos) return file.substr(so + 4);
  }
  return nullptr;
}

std::string dotted(int major, int minor, int patch) {
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
}

}  // namespace

nlohmann::ordered_json shared_object_facts() {
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  dl_iterate_phdr(collect_object, &out);
  return out;
}

nlohmann::ordered_json library_facts(const nlohmann::ordered_json& shared_objects) {
  nlohmann::ordered_json lib;
  lib["glibc"] = gnu_get_libc_version();
  lib["libstdcxx"] = std::to_string(_GLIBCXX_RELEASE) + " (" + std::to_string(__GLIBCXX__) + ")";
  lib["fmt"] = dotted(FMT_VERSION / 10000, FMT_VERSION / 100 % 100, FMT_VERSION % 100);
  lib["spdlog"] = dotted(SPDLOG_VER_MAJOR, SPDLOG_VER_MINOR, SPDLOG_VER_PATCH);
  lib["nlohmann_json"] =
      dotted(NLOHMANN_JSON_VERSION_MAJOR, NLOHMANN_JSON_VERSION_MINOR, NLOHMANN_JSON_VERSION_PATCH);
  lib["yaml_cpp"] = version_from_shared_object(shared_objects, "libyaml-cpp");
  lib["cli11"] = dotted(CLI11_VERSION_MAJOR, CLI11_VERSION_MINOR, CLI11_VERSION_PATCH);
  lib["cpp_httplib"] = version_from_shared_object(shared_objects, "libcpp-httplib");
  lib["prometheus_cpp"] = version_from_shared_object(shared_objects, "libprometheus-cpp-core");
  const unsigned xxh = XXH_versionNumber();
  lib["xxhash"] = dotted(static_cast<int>(xxh / 10000), static_cast<int>(xxh / 100 % 100),
                         static_cast<int>(xxh % 100));
  lib["openssl"] = OpenSSL_version(OPENSSL_VERSION);
  return lib;
}

}  // namespace kiln::preflight

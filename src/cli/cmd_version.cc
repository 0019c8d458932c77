// `kiln version [--json]`: version, git commit, build type, compiler and the CPU ISA in use.
#include <kiln/base/build_info.h>
#include <kiln/base/cpu.h>

#include <nlohmann/json.hpp>

#include <iostream>

#include "cli/command.h"

namespace kiln::cli {

Command add_version_command(CLI::App& parent) {
  auto json = std::make_shared<bool>(false);
  CLI::App* app = parent.add_subcommand("version", "Print the version, commit and build of kiln");
  app->add_flag("--json", *json, "print one JSON object");
  return {app, [json](const GlobalOptions&) {
            const BuildInfo& b = build_info();
            const std::string isa(cpu_isa_name(detect_cpu_features().best_isa()));
            const std::string commit = std::string(b.git_commit) + (b.git_dirty ? "-dirty" : "");
            if (*json) {
              nlohmann::ordered_json out;
              out["version"] = b.version;
              out["git_commit"] = b.git_commit;
              out["git_dirty"] = b.git_dirty;
              out["build_type"] = b.build_type;
              out["compiler"] = b.compiler;
              out["sanitizer"] = b.sanitizer;
              out["isa"] = isa;
              out["build_id"] = executable_build_id();
              std::cout << out.dump() << "\n";
            } else {
              std::cout << "kiln " << b.version << "\n"
                        << "commit     " << commit << "\n"
                        << "build      " << b.build_type
                        << (b.sanitizer.empty() ? "" : " +" + std::string(b.sanitizer)) << "\n"
                        << "compiler   " << b.compiler << "\n"
                        << "cpu isa    " << isa << "\n"
                        << "build id   " << executable_build_id() << "\n";
            }
            return kExitOk;
          }};
}

}  // namespace kiln::cli

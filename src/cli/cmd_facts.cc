// `kiln facts [--json]`: this node's facts (see include/kiln/preflight/facts.h).
#include <kiln/preflight/facts.h>

#include <iostream>

#include "cli/command.h"

namespace kiln::cli {
namespace {

// Prints "a.b.c: value" lines, one per leaf, for people.
void print_flat(const nlohmann::ordered_json& node, const std::string& prefix) {
  if (node.is_object() && !node.empty()) {
    for (const auto& [key, value] : node.items()) {
      print_flat(value, prefix.empty() ? key : prefix + "." + key);
    }
    return;
  }
  std::cout << prefix << ": " << (node.is_string() ? node.get<std::string>() : node.dump()) << "\n";
}

}  // namespace

Command add_facts_command(CLI::App& parent) {
  auto json = std::make_shared<bool>(false);
  auto dirs = std::make_shared<std::vector<std::string>>();
  CLI::App* app = parent.add_subcommand(
      "facts", "Print this node's facts: OS, kernel, CPU, memory, limits, libraries, GPU");
  app->add_flag("--json", *json, "print one JSON object");
  app->add_option("--dir", *dirs,
                  "a directory whose free space to include under disks (repeatable)");
  return {app, [json, dirs](const GlobalOptions&) {
            const nlohmann::ordered_json facts = preflight::collect_node_facts(*dirs);
            if (*json) {
              std::cout << facts.dump() << "\n";
            } else {
              print_flat(facts, "");
            }
            return kExitOk;
          }};
}

}  // namespace kiln::cli

// `kiln lock` and `kiln preflight`: the version lock, and the stack check across nodes'
// facts (include/kiln/preflight/stack.h).
//
//   kiln lock [--facts FILE] [--node NAME] [-o kiln.lock] [--force]
//   kiln preflight --facts [NAME=]FILE... [--lock kiln.lock] [--json]
#include <kiln/base/clock.h>
#include <kiln/base/file_system.h>
#include <kiln/preflight/facts.h>
#include <kiln/preflight/stack.h>

#include <unistd.h>

#include <algorithm>
#include <iomanip>
#include <iostream>
#include <map>

#include "cli/command.h"

namespace kiln::cli {
namespace {

struct LockFlags {
  std::string facts_path;  // empty: this node's facts
  std::string node;
  std::string output = "kiln.lock";
  bool force = false;
};

std::string node_name_of(const nlohmann::json& facts, const std::string& fallback) {
  const auto host = facts.find("host");
  if (host != facts.end() && host->is_object()) {
    const auto name = host->find("hostname");
    if (name != host->end() && name->is_string() && !name->get<std::string>().empty()) {
      return name->get<std::string>();
    }
  }
  return fallback;
}

int run_lock(const LockFlags& flags) {
  nlohmann::json facts;
  if (flags.facts_path.empty()) {
    facts = nlohmann::json::parse(preflight::collect_node_facts().dump());
  } else {
    Result<nlohmann::json> read = preflight::load_facts(flags.facts_path);
    if (!read.ok()) return report_error("lock", read.status().with_context("--facts"));
    facts = std::move(*read);
  }
  const std::string node = flags.node.empty() ? node_name_of(facts, "this node") : flags.node;
  if (!flags.force && access(flags.output.c_str(), F_OK) == 0) {
    return report_error(
        "lock", Status::invalid_argument("-o " + flags.output +
                                         " exists: a lock is replaced on purpose (--force), never "
                                         "by accident"));
  }
  Status s = check_output_path("-o", flags.output);
  if (!s.ok()) return report_error("lock", s);
  const std::string text =
      preflight::render_lock(preflight::stack_of(facts), node, format_wall_time_utc(wall_now_ns()));
  const ByteSpan span{text.data(), text.size()};
  Result<DurableWriteResult> w = write_file_durably(posix_file_system(), flags.output, {&span, 1});
  if (!w.ok()) return report_error("lock", w.status());
  std::cout << "wrote " << flags.output << ": " << preflight::stack_of(facts).size()
            << " stack entries from " << node << "\n";
  return kExitOk;
}

struct PreflightFlags {
  std::vector<std::string> facts;  // [NAME=]FILE
  std::string lock_path;
  bool json = false;
};

int run_preflight(const PreflightFlags& flags) {
  std::map<std::string, preflight::Stack> stacks;
  for (const std::string& arg : flags.facts) {
    const size_t eq = arg.find('=');
    const std::string path = eq == std::string::npos ? arg : arg.substr(eq + 1);
    Result<nlohmann::json> facts = preflight::load_facts(path);
    if (!facts.ok()) return report_error("preflight", facts.status().with_context("--facts"));
    const std::string node =
        eq == std::string::npos ? node_name_of(*facts, path) : arg.substr(0, eq);
    if (stacks.count(node) != 0) {
      return report_error("preflight",
                          Status::invalid_argument("--facts " + arg + ": node '" + node +
                                                   "' twice (name them: NAME=FILE)"));
    }
    stacks[node] = preflight::stack_of(*facts);
  }
  preflight::Stack lock;
  if (!flags.lock_path.empty()) {
    Result<preflight::Stack> read = preflight::load_lock(flags.lock_path);
    if (!read.ok()) return report_error("preflight", read.status().with_context("--lock"));
    lock = std::move(*read);
  }
  const std::vector<preflight::StackFinding> findings =
      preflight::check_stacks(stacks, flags.lock_path.empty() ? nullptr : &lock);
  std::map<std::string, int> failures;
  for (const preflight::StackFinding& f : findings)
    ++failures[f.node];
  if (flags.json) {
    for (const preflight::StackFinding& f : findings) {
      nlohmann::ordered_json j;
      j["node"] = f.node;
      j["check"] = "stack";
      j["path"] = f.path;
      j["expected"] = f.expected;
      j["found"] = f.found;
      j["against"] = f.against;
      std::cout << j.dump() << "\n";
    }
    for (const auto& [node, stack] : stacks) {
      nlohmann::ordered_json j;
      j["node"] = node;
      j["verdict"] = failures.count(node) != 0 ? "fail" : "pass";
      j["failures"] = failures.count(node) != 0 ? failures[node] : 0;
      j["checked"] = stack.size();
      std::cout << j.dump() << "\n";
    }
  } else {
    size_t width = 4;
    for (const auto& [node, stack] : stacks)
      width = std::max(width, node.size());
    std::cout << std::left << std::setw(static_cast<int>(width)) << "NODE"
              << "  VERDICT  CHECK  WHAT\n";
    for (const auto& [node, stack] : stacks) {
      if (failures.count(node) == 0) {
        std::cout << std::setw(static_cast<int>(width)) << node << "  pass     stack  "
                  << stack.size() << " entries as expected\n";
        continue;
      }
      for (const preflight::StackFinding& f : findings) {
        if (f.node != node) continue;
        std::cout << std::setw(static_cast<int>(width)) << node << "  FAIL     stack  " << f.path
                  << ": expected " << f.expected << " (" << f.against << "), found " << f.found
                  << "\n";
      }
    }
  }
  return findings.empty() ? kExitOk : kExitFailure;
}

}  // namespace

Command add_lock_command(CLI::App& parent) {
  auto flags = std::make_shared<LockFlags>();
  CLI::App* app = parent.add_subcommand(
      "lock",
      "Write the version lock (kiln.lock): the software stack of this node, or of a facts "
      "file, that every node of a job must run");
  app->add_option("--facts", flags->facts_path, "a `kiln facts --json` file (default: this node)");
  app->add_option("--node", flags->node, "the node's name in the lock (default: its host name)");
  app->add_option("-o,--output", flags->output, "where to write it")->capture_default_str();
  app->add_flag("--force", flags->force, "replace an existing lock");
  return {app, [flags](const GlobalOptions&) { return run_lock(*flags); }};
}

Command add_preflight_command(CLI::App& parent) {
  auto flags = std::make_shared<PreflightFlags>();
  CLI::App* app = parent.add_subcommand(
      "preflight",
      "Check nodes before a run: their software stacks against each other and the "
      "version lock (exit 1 when a node fails)");
  app->add_option("--facts", flags->facts,
                  "each node's `kiln facts --json`, as FILE or NAME=FILE (at least one)")
      ->required();
  app->add_option("--lock", flags->lock_path, "the version lock (kiln lock)");
  app->add_flag("--json", flags->json,
                "one JSON line per finding (node, check, path, expected, found, against), then "
                "one per node (verdict)");
  return {app, [flags](const GlobalOptions&) { return run_preflight(*flags); }};
}

}  // namespace kiln::cli

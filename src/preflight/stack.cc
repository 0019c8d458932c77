// The stack of a node's facts, the lock file, and the check across nodes (kiln/preflight/stack.h).
#include <kiln/preflight/stack.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <set>
#include <tuple>
#include <utility>

#include <kiln/base/config.h>

namespace kiln::preflight {
namespace {

// Facts that belong to the stack, section by section; "*" takes every field of the section.
struct Section {
  const char* name;
  std::vector<const char*> fields;
};
const std::vector<Section>& stack_sections() {
  static const std::vector<Section> kSections = {
      {"kiln",
       {"version", "git_commit", "git_dirty", "build_type", "compiler", "sanitizer", "build_id"}},
      {"os", {"id", "version_id"}},
      {"kernel", {"release", "machine"}},
      {"cpu", {"best_isa"}},
      {"blas", {"library", "core", "fallback"}},
      // The kernel parameters whose value changes how Kiln behaves (socket buffers and backlog
      // for TCP links, memory overcommit and huge pages for the arenas, the cgroup layout the
      // agents account in). Sizes and limits that only need to be large enough are health.
      {"kernel_params",
       {"somaxconn", "rmem_max_bytes", "wmem_max_bytes", "overcommit_memory",
        "transparent_hugepage", "cgroup_layout"}},
      {"libraries", {"*"}},
      {"shared_objects", {"*"}},
      {"gpu", {"driver_version", "cuda_driver_version", "cuda_runtime_version"}},
      {"environment", {"*"}},
  };
  return kSections;
}

// Variables that name this node or this process rather than the stack: they differ by nature.
bool per_node_variable(const std::string& name) {
  static const std::set<std::string> kPerNode = {"KILN_HOST",
                                                 "KILN_COMM_ADDR",
                                                 "KILN_RANK_ADDRESS",
                                                 "KILN_RANK",
                                                 "KILN_LOCAL_RANK",
                                                 "KILN_NODE_ID",
                                                 "KILN_WORLD_SIZE",
                                                 "KILN_STORE_ADDR",
                                                 "KILN_JOB_ID",
                                                 "KILN_ATTEMPT",
                                                 "KILN_PROGRESS_FD",
                                                 "KILN_FLIGHT_RECORDER_DIR",
                                                 "KILN_CHECKPOINT_DIR",
                                                 "KILN_AGENT_DIR",
                                                 "KILN_TOPOLOGY",
                                                 "KILN_CA_CERT",
                                                 "KILN_SERVER",
                                                 "KILN_COORDINATOR",
                                                 "KILN_SLOTS",
                                                 "KILN_BIN",
                                                 "KILN_SOURCE_DIR",
                                                 "KILN_SKIP_LOG",
                                                 "KILN_OPENBLAS_CORE_FOUND",
                                                 "KILN_CPUS"};
  return kPerNode.count(name) != 0 || name.find("TOKEN") != std::string::npos;
}

std::string text_of(const nlohmann::json& v) {
  if (v.is_null()) return "null";
  if (v.is_string()) return v.get<std::string>();
  return v.dump();
}

// YAML double-quoted scalar: every value and key of the lock is quoted, so "1" stays a string.
std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

std::string missing_value(const std::string& path) {
  return path.rfind("environment.", 0) == 0 ? "(unset)" : "(absent)";
}

}  // namespace

Stack stack_of(const nlohmann::json& facts) {
  Stack stack;
  if (!facts.is_object()) return stack;
  for (const Section& section : stack_sections()) {
    auto it = facts.find(section.name);
    if (it == facts.end() || !it->is_object()) continue;
    const std::string prefix = std::string(section.name) + ".";
    const bool all = section.fields.size() == 1 && std::string(section.fields[0]) == "*";
    if (all) {
      for (auto f = it->begin(); f != it->end(); ++f) {
        if (std::string(section.name) == "environment" && per_node_variable(f.key())) continue;
        stack[prefix + f.key()] = text_of(f.value());
      }
      continue;
    }
    for (const char* field : section.fields) {
      auto f = it->find(field);
      if (f != it->end()) stack[prefix + field] = text_of(*f);
    }
  }
  return stack;
}

std::vector<Finding> check_stacks(const std::map<std::string, Stack>& nodes, const Stack* lock) {
  std::vector<Finding> out;
  auto value_on = [](const Stack& stack, const std::string& path) {
    auto it = stack.find(path);
    return it == stack.end() ? missing_value(path) : it->second;
  };
  auto in_environment = [](const std::string& path) { return path.rfind("environment.", 0) == 0; };
  if (lock != nullptr) {
    for (const auto& [node, stack] : nodes) {
      for (const auto& [path, want] : *lock) {
        const std::string found = value_on(stack, path);
        if (found == want) continue;
        out.push_back({node, path, want, found, "lock"});
      }
      // The lock's environment is exhaustive: a behaviour-changing variable it does not name
      // must be unset (OMP_NUM_THREADS set on every node since the lock was taken still changes
      // the run the lock vouched for).
      for (const auto& [path, value] : stack) {
        if (in_environment(path) && lock->count(path) == 0) {
          out.push_back({node, path, missing_value(path), value, "lock"});
        }
      }
    }
  }
  std::set<std::string> paths;
  for (const auto& [node, stack] : nodes)
    for (const auto& [path, value] : stack)
      paths.insert(path);
  for (const std::string& path : paths) {
    // The lock decides the paths it names, and every variable of the environment.
    if (lock != nullptr && (lock->count(path) != 0 || in_environment(path))) continue;
    std::map<std::string, std::vector<std::string>> holders;  // value -> nodes
    for (const auto& [node, stack] : nodes)
      holders[value_on(stack, path)].push_back(node);
    if (holders.size() < 2) continue;
    // A strict majority: at most one value can hold one.
    std::string majority;
    bool has_majority = false;
    for (const auto& [value, who] : holders) {
      if (2 * who.size() > nodes.size()) {
        majority = value;
        has_majority = true;
      }
    }
    std::string all_values;
    for (const auto& [value, who] : holders)
      all_values += (all_values.empty() ? "" : " | ") + value;
    for (const auto& [value, who] : holders) {
      if (has_majority && value == majority) continue;
      for (const std::string& node : who) {
        out.push_back({node, path, has_majority ? majority : all_values, value,
                       has_majority ? "majority" : "no majority"});
      }
    }
  }
  std::sort(out.begin(), out.end(), [](const Finding& a, const Finding& b) {
    return std::tie(a.node, a.path, a.against) < std::tie(b.node, b.path, b.against);
  });
  return out;
}

std::string render_lock(const Lock& lock, const std::string& node, const std::string& at) {
  std::string out =
      "# kiln.lock: the software stack every node of a job must run (kiln lock; "
      "docs/preflight.md).\n"
      "# Delete a line to stop checking that path against the lock (the nodes are still\n"
      "# compared with each other); the environment is exhaustive: a variable not named\n"
      "# here must be unset.\n"
      "schema: kiln.lock/1\n"
      "taken_from:\n"
      "  node: " +
      quoted(node) + "\n  at: " + quoted(at) + "\nstack:\n";
  for (const auto& [path, value] : lock.stack)
    out += "  " + quoted(path) + ": " + quoted(value) + "\n";
  if (lock.trial) {
    const TrialExpectation& t = *lock.trial;
    // Numbers plain (the reader takes no quoted number), with the digits that read back the
    // same value.
    auto number = [](double v) {
      char buf[40];
      std::snprintf(buf, sizeof buf, "%.17g", v);
      return std::string(buf);
    };
    out +=
        "# What a trial run of the job's model gave on that node; a node's trial is held\n"
        "# against it when its signature is the same (`kiln preflight --job --level full`).\n"
        "trial:\n  job: " +
        quoted(t.job) + "\n  signature: " + quoted(t.signature) + "\n  loss: " + number(t.loss) +
        "\n  tokens_per_s: " + number(t.tokens_per_s) + "\n  loss_rtol: " + number(t.loss_rtol) +
        "\n  tokens_per_s_fraction: " + number(t.tokens_per_s_fraction) + "\n";
  }
  return out;
}

Result<Lock> load_lock(const std::string& path) {
  KILN_ASSIGN_OR_RETURN(ConfigDocument doc, ConfigDocument::load_file(path));
  ConfigReader root = doc.root();
  std::string schema;
  root.read_enum("schema", &schema, {"kiln.lock/1"}, kRequired);
  std::string node;
  std::string at;
  root.section("taken_from").read_string("node", &node).read_string("at", &at);
  Lock lock;
  root.read_string_map("stack", &lock.stack, kRequired);
  if (root.has("trial")) {
    TrialExpectation t;
    root.section("trial")
        .read_string("job", &t.job)
        .read_string("signature", &t.signature, kRequired)
        .read_double("loss", &t.loss, -1e9, 1e9, kRequired)
        .read_double("tokens_per_s", &t.tokens_per_s, 0, 1e15, kRequired)
        .read_double("loss_rtol", &t.loss_rtol, 0, 1)
        .read_double("tokens_per_s_fraction", &t.tokens_per_s_fraction, 0, 1);
    lock.trial = std::move(t);
  }
  KILN_RETURN_IF_ERROR(doc.finish());
  return lock;
}

Result<nlohmann::json> load_facts(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::not_found("facts file " + path + ": cannot be opened");
  std::string text;
  text.resize(kFactsBytesMax + 1);
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (in.bad()) return Status::io_error("facts file " + path + ": read failed");
  text.resize(static_cast<size_t>(in.gcount()));
  if (text.size() > kFactsBytesMax) {
    return Status::invalid_argument("facts file " + path + ": larger than " +
                                    std::to_string(kFactsBytesMax) + " bytes");
  }
  nlohmann::json facts = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (facts.is_discarded()) {
    return Status::invalid_argument("facts file " + path +
                                    ": not JSON (save the output of `kiln facts --json`)");
  }
  if (!facts.is_object() || !facts.contains("schema") || facts["schema"] != "kiln.facts/1") {
    return Status::invalid_argument("facts file " + path +
                                    ": not a kiln.facts/1 document (its \"schema\" field)");
  }
  return facts;
}

}  // namespace kiln::preflight

// Job spec parsing (YAML through ConfigDocument) and its JSON form. See
// include/kiln/sched/job_spec.h for the layout and the invariants.
//
// The rules are written once, as functions that return "" or a complaint, and both readers
// apply them: the YAML reader reports a complaint at the key's line, the JSON reader at the
// field's name. Rules between fields (min_nodes <= nodes, command or config) run last, on the
// struct, in cross_field_problems().
#include <kiln/sched/job_spec.h>

#include <charconv>
#include <limits>
#include <set>

#include <kiln/base/config.h>
#include <kiln/sched/duration.h>

namespace kiln::sched {
namespace {

using Json = nlohmann::json;

constexpr const char* kPreflightNames[] = {"none", "quick", "full"};

bool is_alnum(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

// "A100" or "A100|H100": plain names joined by '|'; empty is any.
std::string check_gpu_models(const std::string& models);

// A job or queue name: it appears in ids, paths and metric labels.
std::string check_plain_name(const std::string& name) {
  const std::string rule = std::to_string(kJobNameBytesMax) +
                           " characters of A-Z a-z 0-9 . _ -, starting with a letter or digit";
  if (name.empty() || name.size() > kJobNameBytesMax) return "must be 1.." + rule;
  if (!is_alnum(name.front())) return "'" + name + "' must be 1.." + rule;
  for (char c : name) {
    if (!is_alnum(c) && c != '.' && c != '_' && c != '-')
      return "'" + name + "' must be 1.." + rule;
  }
  return "";
}

std::string check_env_name(const std::string& name) {
  if (name.empty() || name.size() > kEnvNameBytesMax) {
    return "an environment variable name must be 1.." + std::to_string(kEnvNameBytesMax) +
           " characters";
  }
  bool ok = !(name.front() >= '0' && name.front() <= '9');
  for (char c : name)
    ok = ok && (is_alnum(c) || c == '_');
  if (!ok)
    return "'" + name + "' is not a valid environment variable name ([A-Za-z_][A-Za-z0-9_]*)";
  if (name.rfind("KILN_", 0) == 0) {
    return "'" + name + "' is reserved: KILN_* variables are set by Kiln for every rank";
  }
  return "";
}

std::string check_env_value(const std::string& value) {
  if (value.size() <= kEnvValueBytesMax) return "";
  return "value is " + std::to_string(value.size()) + " bytes; at most " +
         std::to_string(kEnvValueBytesMax);
}

// "2GiB", "512MB" or plain bytes "1073741824": an integer and an optional unit, no space.
Result<int64_t> parse_memory_bytes(const std::string& text) {
  const std::string hint =
      "\"" + text +
      "\" is not a size: write integer bytes or an integer with KiB, MiB, "
      "GiB, TiB (powers of 1024) or KB, MB, GB, TB (powers of 1000), e.g. 2GiB";
  int64_t number = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, number);
  if (ptr == text.data() || number < 0) return Status::invalid_argument(hint);
  const std::string_view unit(ptr, static_cast<size_t>(end - ptr));
  struct Unit {
    std::string_view name;
    int64_t bytes;
  };
  static constexpr Unit kUnits[] = {{"", 1},
                                    {"KiB", 1LL << 10},
                                    {"MiB", 1LL << 20},
                                    {"GiB", 1LL << 30},
                                    {"TiB", 1LL << 40},
                                    {"KB", 1000},
                                    {"MB", 1000LL * 1000},
                                    {"GB", 1000LL * 1000 * 1000},
                                    {"TB", 1000LL * 1000 * 1000 * 1000}};
  for (const Unit& u : kUnits) {
    if (u.name != unit) continue;
    if (ec == std::errc::result_out_of_range ||
        number > std::numeric_limits<int64_t>::max() / u.bytes) {
      return Status::invalid_argument("\"" + text + "\" is more bytes than int64 holds");
    }
    return number * u.bytes;
  }
  return Status::invalid_argument(hint);
}

// A rule between fields, named as both forms name the field it is reported at.
struct Problem {
  std::string yaml_key;
  std::string json_field;
  std::string what;
};

std::string check_gpu_models(const std::string& models) {
  if (models.empty()) return "";
  size_t start = 0;
  while (true) {
    const size_t bar = models.find('|', start);
    const std::string one = models.substr(start, bar == std::string::npos ? bar : bar - start);
    if (!check_plain_name(one).empty()) {
      return "'" + models + "' is not a GPU model or models joined by '|' (A100|H100)";
    }
    if (bar == std::string::npos) return "";
    start = bar + 1;
  }
}

std::vector<Problem> cross_field_problems(const JobSpec& spec) {
  std::vector<Problem> problems;
  if (spec.topology_same != "none" && spec.topology_spread != "none") {
    problems.push_back({"topology", "topology",
                        "same and spread exclude each other (pack into one domain, or spread "
                        "across racks)"});
  }
  if (spec.command.empty() && spec.config.empty()) {
    problems.push_back({"config", "config",
                        "neither command nor config is set; give the training config "
                        "(config: path.yaml) or the ranks' argv (command: [...])"});
  }
  if (spec.min_nodes > spec.nodes) {
    problems.push_back({"min_nodes", "min_nodes",
                        "min_nodes " + std::to_string(spec.min_nodes) + " is more than nodes " +
                            std::to_string(spec.nodes) + " (the most the job runs on)"});
  }
  if (spec.restart_backoff_ms > spec.restart_backoff_max_ms) {
    problems.push_back({"restart_backoff_max", "restart_backoff_max_ms",
                        "restart_backoff (" + std::to_string(spec.restart_backoff_ms) +
                            " ms) is more than restart_backoff_max (" +
                            std::to_string(spec.restart_backoff_max_ms) + " ms)"});
  }
  if (spec.command.size() > kCommandArgsMax) {
    problems.push_back({"command", "command",
                        std::to_string(spec.command.size()) + " arguments; at most " +
                            std::to_string(kCommandArgsMax)});
  }
  if (spec.env.size() > kEnvVarsMax) {
    problems.push_back(
        {"env", "env",
         std::to_string(spec.env.size()) + " variables; at most " + std::to_string(kEnvVarsMax)});
  }
  return problems;
}

// --- YAML ---------------------------------------------------------------------------------------

// True if `key` holds a value a string accessor can read, so that a rule on it is worth
// checking (a wrong type or a missing key is reported by the accessor already).
bool readable_scalar(const ConfigReader& reader, std::string_view key) {
  return reader.has(key) && !reader.is_mapping(key);
}

void check_at(ConfigReader& reader, std::string_view key, const std::string& complaint) {
  if (!complaint.empty()) reader.report(key, complaint);
}

void read_duration(ConfigReader& reader, std::string_view key, int64_t min_ms, int64_t* out_ms) {
  std::string text;
  reader.read_string(key, &text);
  if (!readable_scalar(reader, key)) return;
  Result<int64_t> ms = parse_duration_ms(text);
  if (!ms.ok()) {
    reader.report(key, ms.status().message());
  } else if (*ms < min_ms) {
    reader.report(key, "must be at least " + std::to_string(min_ms) + " ms");
  } else {
    *out_ms = *ms;
  }
}

void read_resources(ConfigReader resources, RankResources* out) {
  resources.read_int("cpus", &out->cpus, 1, kRankCpusMax)
      .read_int("gpus", &out->gpus, 0, kRankGpusMax);
  std::string memory;
  resources.read_string("memory", &memory);
  if (!readable_scalar(resources, "memory")) return;
  Result<int64_t> bytes = parse_memory_bytes(memory);
  if (bytes.ok()) {
    out->memory_bytes = *bytes;
  } else {
    resources.report("memory", bytes.status().message());
  }
}

// env: a mapping of NAME to a string, or to {value: .., secret: true|false}, in document order.
void read_env(ConfigReader env, std::vector<EnvVar>* out) {
  for (const std::string& name : env.keys()) {
    EnvVar var;
    var.name = name;
    if (env.is_mapping(name)) {
      env.section(name)
          .read_string("value", &var.value, kRequired)
          .read_bool("secret", &var.secret);
    } else {
      env.read_string(name, &var.value);
    }
    check_at(env, name, check_env_name(name));
    check_at(env, name, check_env_value(var.value));
    out->push_back(std::move(var));
  }
}

void read_spec(ConfigReader root, JobSpec* spec) {
  root.read_string("name", &spec->name, kRequired);
  if (readable_scalar(root, "name")) check_at(root, "name", check_plain_name(spec->name));
  root.read_string_list("command", &spec->command).read_string("config", &spec->config);
  if (root.has("command") && spec->command.empty()) root.report("command", "must not be empty");
  root.read_int("nodes", &spec->nodes, 1, kJobNodesMax)
      .read_int("min_nodes", &spec->min_nodes, 0, kJobNodesMax)
      .read_int("ranks_per_node", &spec->ranks_per_node, 1, kRanksPerNodeMax)
      .read_string("queue", &spec->queue)
      .read_int("priority", &spec->priority, kPriorityMin, kPriorityMax)
      .read_int("max_restarts", &spec->max_restarts, 0, kMaxRestartsMax);
  if (readable_scalar(root, "queue")) check_at(root, "queue", check_plain_name(spec->queue));
  read_resources(root.section("resources"), &spec->resources);
  read_env(root.section("env"), &spec->env);
  ConfigReader checkpoint = root.section("checkpoint");
  checkpoint.read_string("dir", &spec->checkpoint_dir)
      .read_int("every", &spec->checkpoint_every, 0, std::numeric_limits<int>::max());
  read_duration(root, "restart_backoff", 0, &spec->restart_backoff_ms);
  read_duration(root, "restart_backoff_max", 0, &spec->restart_backoff_max_ms);
  read_duration(root, "progress_timeout", 1, &spec->progress_timeout_ms);
  read_duration(root, "start_timeout", 1, &spec->start_timeout_ms);
  std::string preflight = "none";
  root.read_enum("preflight", &preflight, {"none", "quick", "full"});
  for (int i = 0; i < 3; ++i) {
    if (preflight == kPreflightNames[i]) spec->preflight = static_cast<PreflightLevel>(i);
  }
  read_duration(root, "time_limit", 0, &spec->time_limit_ms);
  root.read_string("gpu_model", &spec->gpu_model);
  if (readable_scalar(root, "gpu_model"))
    check_at(root, "gpu_model", check_gpu_models(spec->gpu_model));
  ConfigReader topology = root.section("topology");
  topology.read_enum("same", &spec->topology_same, {"none", "rack", "switch"})
      .read_bool("required", &spec->topology_required)
      .read_enum("spread", &spec->topology_spread, {"none", "rack"});
}

// --- JSON ---------------------------------------------------------------------------------------

// Reads the fields of one JSON object, each once, recording every problem with the field's
// dotted name; finish() adds the fields nobody asked for.
class JsonFields {
 public:
  JsonFields(const Json& object, std::string path, std::vector<std::string>* errors)
      : object_(object), path_(std::move(path)), errors_(errors) {}

  std::string field(std::string_view key) const {
    return path_.empty() ? std::string(key) : path_ + "." + std::string(key);
  }
  void error(std::string_view key, const std::string& what) {
    errors_->push_back("field '" + field(key) + "': " + what);
  }
  // The value of `key`, or nullptr when absent (or null). Marks it known.
  const Json* find(std::string_view key) {
    known_.emplace(key);
    auto it = object_.find(std::string(key));
    return it == object_.end() || it->is_null() ? nullptr : &*it;
  }
  void read_string(std::string_view key, std::string* out) {
    if (const Json* v = find(key)) {
      if (v->is_string()) {
        *out = v->get<std::string>();
      } else {
        error(key, std::string("expected a string, got ") + v->type_name());
      }
    }
  }
  void read_bool(std::string_view key, bool* out) {
    if (const Json* v = find(key)) {
      if (v->is_boolean()) {
        *out = v->get<bool>();
      } else {
        error(key, std::string("expected true or false, got ") + v->type_name());
      }
    }
  }
  template <typename T>
  void read_int(std::string_view key, T* out, int64_t min, int64_t max) {
    const Json* v = find(key);
    if (v == nullptr) return;
    if (!v->is_number_integer()) {
      error(key, std::string("expected an integer, got ") + v->type_name());
      return;
    }
    // An unsigned value past int64's range would wrap in get<int64_t>(): out of range as is.
    const bool past_int64 =
        v->is_number_unsigned() &&
        v->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
    const int64_t value = past_int64 ? max : v->get<int64_t>();
    if (past_int64 || value < min || value > max) {
      error(key, v->dump() + " is out of range [" + std::to_string(min) + ", " +
                     std::to_string(max) + "]");
      return;
    }
    *out = static_cast<T>(value);
  }
  void finish() {
    for (auto it = object_.begin(); it != object_.end(); ++it) {
      if (known_.count(it.key()) == 0) error(it.key(), "unknown field");
    }
  }

 private:
  const Json& object_;
  std::string path_;
  std::vector<std::string>* errors_;
  std::set<std::string, std::less<>> known_;
};

void env_from_json(const Json& list, std::vector<std::string>* errors, std::vector<EnvVar>* out) {
  std::set<std::string> seen;
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string path = "env[" + std::to_string(i) + "]";
    if (!list[i].is_object()) {
      errors->push_back("field '" + path + "': expected an object");
      continue;
    }
    JsonFields fields(list[i], path, errors);
    EnvVar var;
    fields.read_string("name", &var.name);
    fields.read_string("value", &var.value);
    fields.read_bool("secret", &var.secret);
    fields.finish();
    for (const std::string& complaint : {check_env_name(var.name), check_env_value(var.value)}) {
      if (!complaint.empty()) fields.error("name", complaint);
    }
    if (!seen.insert(var.name).second) fields.error("name", "'" + var.name + "' appears twice");
    out->push_back(std::move(var));
  }
}

void spec_from_json(JsonFields& f, std::vector<std::string>* errors, JobSpec* spec) {
  if (f.find("name") == nullptr) {
    f.error("name", "required field is missing");
  } else {
    f.read_string("name", &spec->name);
    if (!check_plain_name(spec->name).empty()) f.error("name", check_plain_name(spec->name));
  }
  if (const Json* command = f.find("command")) {
    if (!command->is_array()) f.error("command", "expected an array of strings");
    for (size_t i = 0; command->is_array() && i < command->size(); ++i) {
      if ((*command)[i].is_string()) {
        spec->command.push_back((*command)[i].get<std::string>());
      } else {
        f.error("command[" + std::to_string(i) + "]", "expected a string");
      }
    }
  }
  f.read_string("config", &spec->config);
  f.read_int("nodes", &spec->nodes, 1, kJobNodesMax);
  f.read_int("min_nodes", &spec->min_nodes, 0, kJobNodesMax);
  f.read_int("ranks_per_node", &spec->ranks_per_node, 1, kRanksPerNodeMax);
  f.read_string("queue", &spec->queue);
  if (!check_plain_name(spec->queue).empty()) f.error("queue", check_plain_name(spec->queue));
  f.read_int("priority", &spec->priority, kPriorityMin, kPriorityMax);
  f.read_string("checkpoint_dir", &spec->checkpoint_dir);
  f.read_int("checkpoint_every", &spec->checkpoint_every, 0, std::numeric_limits<int>::max());
  f.read_int("max_restarts", &spec->max_restarts, 0, kMaxRestartsMax);
  f.read_int("restart_backoff_ms", &spec->restart_backoff_ms, 0, kDurationMsMax);
  f.read_int("restart_backoff_max_ms", &spec->restart_backoff_max_ms, 0, kDurationMsMax);
  f.read_int("progress_timeout_ms", &spec->progress_timeout_ms, 1, kDurationMsMax);
  f.read_int("start_timeout_ms", &spec->start_timeout_ms, 1, kDurationMsMax);
  std::string preflight = "none";
  f.read_string("preflight", &preflight);
  bool known_level = false;
  for (int i = 0; i < 3; ++i) {
    if (preflight != kPreflightNames[i]) continue;
    spec->preflight = static_cast<PreflightLevel>(i);
    known_level = true;
  }
  if (!known_level) f.error("preflight", "expected none, quick or full, got '" + preflight + "'");
  f.read_int("time_limit_ms", &spec->time_limit_ms, 0, kDurationMsMax);
  f.read_string("gpu_model", &spec->gpu_model);
  if (!check_gpu_models(spec->gpu_model).empty()) {
    f.error("gpu_model", check_gpu_models(spec->gpu_model));
  }
  if (const Json* topology = f.find("topology")) {
    if (!topology->is_object()) f.error("topology", "expected an object");
    if (topology->is_object()) {
      JsonFields t(*topology, f.field("topology"), errors);
      t.read_string("same", &spec->topology_same);
      t.read_bool("required", &spec->topology_required);
      t.read_string("spread", &spec->topology_spread);
      t.finish();
      if (spec->topology_same != "none" && spec->topology_same != "rack" &&
          spec->topology_same != "switch") {
        t.error("same", "expected none, rack or switch, got '" + spec->topology_same + "'");
      }
      if (spec->topology_spread != "none" && spec->topology_spread != "rack") {
        t.error("spread", "expected none or rack, got '" + spec->topology_spread + "'");
      }
    }
  }
  if (const Json* resources = f.find("resources")) {
    if (!resources->is_object()) f.error("resources", "expected an object");
    if (resources->is_object()) {
      JsonFields r(*resources, f.field("resources"), errors);
      r.read_int("cpus", &spec->resources.cpus, 1, kRankCpusMax);
      r.read_int("memory_bytes", &spec->resources.memory_bytes, 0,
                 std::numeric_limits<int64_t>::max());
      r.read_int("gpus", &spec->resources.gpus, 0, kRankGpusMax);
      r.finish();
    }
  }
  if (const Json* env = f.find("env")) {
    if (!env->is_array()) f.error("env", "expected an array of {name, value, secret}");
    if (env->is_array()) env_from_json(*env, errors, &spec->env);
  }
}

Result<JobSpec> spec_from_document(const ConfigDocument& doc) {
  JobSpec spec;
  ConfigReader root = doc.root();
  read_spec(root, &spec);
  for (const Problem& p : cross_field_problems(spec)) {
    // A rule between two keys is reported at the one written, so the line points somewhere real.
    std::string key = p.yaml_key;
    if (key == "restart_backoff_max" && !root.has(key)) key = "restart_backoff";
    root.report(key, p.what);
  }
  KILN_RETURN_IF_ERROR(doc.finish());
  if (spec.command.empty()) spec.command = {"kiln", "train", spec.config};
  return spec;
}

}  // namespace

std::string_view preflight_level_name(PreflightLevel level) {
  const int i = static_cast<int>(level);
  return i >= 0 && i < 3 ? kPreflightNames[i] : "unknown";
}

int JobSpec::effective_min_nodes() const {
  return min_nodes == 0 ? nodes : min_nodes;
}

Result<JobSpec> parse_job_spec(std::string_view yaml, const std::string& source_name) {
  KILN_ASSIGN_OR_RETURN(ConfigDocument doc, ConfigDocument::parse(yaml, source_name));
  return spec_from_document(doc);
}

Result<JobSpec> load_job_spec(const std::string& path) {
  KILN_ASSIGN_OR_RETURN(ConfigDocument doc, ConfigDocument::load_file(path));
  return spec_from_document(doc);
}

Json job_spec_to_json(const JobSpec& spec, bool with_secrets) {
  Json env = Json::array();
  for (const EnvVar& var : spec.env) {
    Json entry = {{"name", var.name}};
    if (var.secret) entry["secret"] = true;
    if (!var.secret || with_secrets) entry["value"] = var.value;
    env.push_back(std::move(entry));
  }
  return Json{
      {"name", spec.name},
      {"command", spec.command},
      {"config", spec.config},
      {"nodes", spec.nodes},
      {"min_nodes", spec.min_nodes},
      {"ranks_per_node", spec.ranks_per_node},
      {"resources",
       {{"cpus", spec.resources.cpus},
        {"memory_bytes", spec.resources.memory_bytes},
        {"gpus", spec.resources.gpus}}},
      {"queue", spec.queue},
      {"priority", spec.priority},
      {"env", std::move(env)},
      {"checkpoint_dir", spec.checkpoint_dir},
      {"checkpoint_every", spec.checkpoint_every},
      {"max_restarts", spec.max_restarts},
      {"restart_backoff_ms", spec.restart_backoff_ms},
      {"restart_backoff_max_ms", spec.restart_backoff_max_ms},
      {"progress_timeout_ms", spec.progress_timeout_ms},
      {"start_timeout_ms", spec.start_timeout_ms},
      {"preflight", std::string(preflight_level_name(spec.preflight))},
      {"time_limit_ms", spec.time_limit_ms},
      {"gpu_model", spec.gpu_model},
      {"topology",
       {{"same", spec.topology_same},
        {"required", spec.topology_required},
        {"spread", spec.topology_spread}}},
  };
}

Result<JobSpec> job_spec_from_json(const Json& json) {
  if (!json.is_object()) {
    return Status::invalid_argument(std::string("job spec: expected a JSON object, got ") +
                                    json.type_name());
  }
  std::vector<std::string> errors;
  JobSpec spec;
  JsonFields fields(json, "", &errors);
  spec_from_json(fields, &errors, &spec);
  fields.finish();
  for (const Problem& p : cross_field_problems(spec)) {
    errors.push_back("field '" + p.json_field + "': " + p.what);
  }
  if (!errors.empty()) {
    std::string message = "job spec:";
    for (const std::string& e : errors)
      message += (errors.size() == 1 ? " " : "\n  ") + e;
    return Status::invalid_argument(message);
  }
  if (spec.command.empty()) spec.command = {"kiln", "train", spec.config};
  return spec;
}

}  // namespace kiln::sched

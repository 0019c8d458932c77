// What sinfo and squeue print in the formats Kiln asks for, and Slurm's host lists.
#include <algorithm>
#include <charconv>
#include <set>
#include <string_view>

#include <kiln/sched/slurm.h>

namespace kiln::sched {
namespace {

std::vector<std::string> split(std::string_view text, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    const size_t end = text.find(sep, start);
    out.emplace_back(text.substr(start, end == std::string_view::npos ? end : end - start));
    if (end == std::string_view::npos) return out;
    start = end + 1;
  }
}

// Splits a host list at the commas outside brackets.
Result<std::vector<std::string>> split_top_level(std::string_view list) {
  std::vector<std::string> out;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i < list.size(); ++i) {
    if (list[i] == '[') ++depth;
    if (list[i] == ']') --depth;
    if (depth < 0 || depth > 1) {
      return Status::invalid_argument("host list '" + std::string(list) + "': unbalanced brackets");
    }
    if (list[i] == ',' && depth == 0) {
      out.emplace_back(list.substr(start, i - start));
      start = i + 1;
    }
  }
  if (depth != 0) {
    return Status::invalid_argument("host list '" + std::string(list) + "': unbalanced brackets");
  }
  out.emplace_back(list.substr(start));
  return out;
}

Result<int64_t> parse_number(std::string_view text, const std::string& context) {
  int64_t v = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || ptr != text.data() + text.size() || v < 0) {
    return Status::invalid_argument(context + ": '" + std::string(text) + "' is not a number");
  }
  return v;
}

// Expands one item ("n[1-3,5]x[01-02]" or "gpu7") into `out`.
Status expand_item(const std::string& item, const std::string& list, size_t max_names,
                   std::vector<std::string>* out) {
  const size_t open = item.find('[');
  if (open == std::string::npos) {
    if (item.find(']') != std::string::npos) {
      return Status::invalid_argument("host list '" + list + "': unbalanced brackets");
    }
    if (out->size() >= max_names) {
      return Status::invalid_argument("host list '" + list + "': more than " +
                                      std::to_string(max_names) + " names");
    }
    out->push_back(item);
    return Status();
  }
  const size_t close = item.find(']', open);
  if (close == std::string::npos) {
    return Status::invalid_argument("host list '" + list + "': unbalanced brackets");
  }
  const std::string prefix = item.substr(0, open);
  const std::string rest = item.substr(close + 1);
  for (const std::string& range :
       split(std::string_view(item).substr(open + 1, close - open - 1), ',')) {
    const size_t dash = range.find('-');
    const std::string lo_text = range.substr(0, dash);
    const std::string hi_text = dash == std::string::npos ? lo_text : range.substr(dash + 1);
    KILN_ASSIGN_OR_RETURN(int64_t lo, parse_number(lo_text, "host list '" + list + "'"));
    KILN_ASSIGN_OR_RETURN(int64_t hi, parse_number(hi_text, "host list '" + list + "'"));
    if (hi < lo) {
      return Status::invalid_argument("host list '" + list + "': range " + range + " is empty");
    }
    if (static_cast<uint64_t>(hi - lo) >= max_names) {
      return Status::invalid_argument("host list '" + list + "': more than " +
                                      std::to_string(max_names) + " names");
    }
    // Zero padding: "01-10" keeps two digits.
    const size_t width = lo_text.size() > 1 && lo_text[0] == '0' ? lo_text.size() : 0;
    for (int64_t v = lo; v <= hi; ++v) {
      std::string digits = std::to_string(v);
      if (digits.size() < width) digits.insert(0, width - digits.size(), '0');
      KILN_RETURN_IF_ERROR(expand_item(prefix + digits + rest, list, max_names, out));
    }
  }
  return Status();
}

}  // namespace

Result<std::vector<std::string>> expand_hostlist(const std::string& list, size_t max_names) {
  std::vector<std::string> out;
  if (list.empty()) return out;
  KILN_ASSIGN_OR_RETURN(std::vector<std::string> items, split_top_level(list));
  for (const std::string& item : items) {
    if (item.empty()) {
      return Status::invalid_argument("host list '" + list + "': an empty name");
    }
    KILN_RETURN_IF_ERROR(expand_item(item, list, max_names, &out));
  }
  return out;
}

Result<std::vector<ExternalNode>> parse_sinfo(const std::string& text) {
  std::vector<ExternalNode> out;
  std::set<std::string> seen;
  size_t line_no = 0;
  for (const std::string& line : split(text, '\n')) {
    ++line_no;
    if (line.empty()) continue;
    // The reason (last) may itself hold '|': split at the first six.
    std::vector<std::string> f;
    size_t start = 0;
    for (int i = 0; i < 6; ++i) {
      const size_t bar = line.find('|', start);
      if (bar == std::string::npos) break;
      f.push_back(line.substr(start, bar - start));
      start = bar + 1;
    }
    f.push_back(line.substr(start));
    const std::string where = "sinfo line " + std::to_string(line_no) + " '" + line + "'";
    if (f.size() != 7) return Status::invalid_argument(where + ": expected 7 fields");
    ExternalNode n;
    n.name = f[0];
    if (n.name.empty()) return Status::invalid_argument(where + ": no node name");
    if (!seen.insert(n.name).second) continue;
    // %T: "idle", "mixed", "allocated", "drained", "draining", "down", "down*", "idle~", ...;
    // the symbols after the state are flags: '*' not responding, '~' powered off, ...
    std::string state = f[1];
    const bool not_responding = state.find('*') != std::string::npos;
    state.erase(std::remove_if(state.begin(), state.end(),
                               [](char c) { return !(c >= 'a' && c <= 'z') && c != '_'; }),
                state.end());
    n.responding = !not_responding && state != "unknown" && state != "future";
    n.down = n.responding && (state == "down" || state == "fail" || state == "failing");
    n.drained = state == "drained" || state == "draining" || state == "drain";
    KILN_ASSIGN_OR_RETURN(int64_t cpus, parse_number(f[2], where + ": CPUs"));
    n.cpus = static_cast<int>(std::min<int64_t>(cpus, 1 << 20));
    KILN_ASSIGN_OR_RETURN(int64_t memory_mb, parse_number(f[3], where + ": memory"));
    // Slurm's default RealMemory is 1 (MB): "not configured", not a one-megabyte node.
    n.memory_bytes = memory_mb > 1 ? memory_mb * 1024 * 1024 : 0;
    n.partition = f[4];
    if (!n.partition.empty() && n.partition.back() == '*') n.partition.pop_back();
    // %G: "gpu:4", "gpu:h200:8(S:0-1)", "(null)"; several comma-separated.
    std::string gres;  // without the "(S:0-1)" socket notes, which hold ':' and ','
    for (int depth = 0; char c : f[5]) {
      depth += c == '(' ? 1 : c == ')' ? -1 : 0;
      if (depth == 0 && c != ')') gres += c;
    }
    for (const std::string& g : split(gres, ',')) {
      if (g.rfind("gpu:", 0) != 0) continue;
      const std::string count = g.substr(g.rfind(':') + 1);
      Result<int64_t> c = parse_number(count, where + ": GRES");
      if (c.ok()) n.gpus += static_cast<int>(std::min<int64_t>(*c, 1 << 16));
    }
    n.reason = f[6] == "none" ? "" : f[6];
    out.push_back(std::move(n));
  }
  return out;
}

bool slurm_state_ended(const std::string& state) {
  static const std::set<std::string> kEnded = {
      "BOOT_FAIL",     "CANCELLED", "COMPLETED", "DEADLINE",     "FAILED", "NODE_FAIL",
      "OUT_OF_MEMORY", "PREEMPTED", "REVOKED",   "SPECIAL_EXIT", "TIMEOUT"};
  return kEnded.count(state) != 0;
}

Result<std::vector<SlurmJob>> parse_squeue(const std::string& text) {
  std::vector<SlurmJob> out;
  size_t line_no = 0;
  for (const std::string& line : split(text, '\n')) {
    ++line_no;
    if (line.empty()) continue;
    const std::string where = "squeue line " + std::to_string(line_no) + " '" + line + "'";
    // Anyone's job name may hold '|': the id is the first field, state, reason and nodes the
    // last three, and the name what lies between.
    std::vector<std::string> f = split(line, '|');
    if (f.size() < 5) return Status::invalid_argument(where + ": expected 5 fields");
    SlurmJob j;
    j.id = f[0];
    const size_t n = f.size();
    for (size_t i = 1; i + 3 < n; ++i)
      j.name += (i > 1 ? "|" : "") + f[i];
    j.state = f[n - 3];
    j.reason = f[n - 2] == "None" ? "" : f[n - 2];
    f[4] = f[n - 1];
    if (j.id.empty() || j.state.empty()) {
      return Status::invalid_argument(where + ": no job id or state");
    }
    Result<std::vector<std::string>> nodes = expand_hostlist(f[4]);
    if (!nodes.ok()) return nodes.status().with_context(where);
    j.nodes = std::move(*nodes);
    out.push_back(std::move(j));
  }
  return out;
}

}  // namespace kiln::sched

// Merging and filtering a job's rank logs (kiln/sched/log_merge.h).
#include <kiln/sched/log_merge.h>

#include <algorithm>
#include <queue>
#include <utility>

namespace kiln::sched {

int log_level_rank(std::string_view level) {
  if (level == "debug" || level == "trace") return 0;
  if (level == "info") return 1;
  if (level == "warn" || level == "warning") return 2;
  if (level == "error" || level == "fatal" || level == "critical") return 3;
  return -1;
}

Result<LogRecord> parse_log_record(const nlohmann::json& record, const std::string& node) {
  if (!record.is_object()) return Status::invalid_argument("a log record is not a JSON object");
  for (const char* key : {"ts", "line"}) {
    if (!record.contains(key) || !record[key].is_string()) {
      return Status::invalid_argument(std::string("a log record has no string '") + key + "'");
    }
  }
  if (!record.contains("rank") || !record["rank"].is_number_integer()) {
    return Status::invalid_argument("a log record has no integer 'rank'");
  }
  LogRecord out;
  out.ts = record["ts"].get<std::string>();
  out.rank = record["rank"].get<int>();
  out.node = node;
  out.stream = record.contains("stream") && record["stream"].is_string()
                   ? record["stream"].get<std::string>()
                   : "stdout";
  out.line = record["line"].get<std::string>();
  out.level = "info";
  // Only a line that looks like a JSON object is parsed: most lines are plain text.
  if (!out.line.empty() && out.line.front() == '{') {
    const nlohmann::json inner =
        nlohmann::json::parse(out.line, nullptr, /*allow_exceptions=*/false);
    if (inner.is_object() && inner.contains("level") && inner["level"].is_string()) {
      out.level = inner["level"].get<std::string>();
    }
  }
  return out;
}

bool log_matches(const LogRecord& record, const LogFilter& filter) {
  if (filter.min_level > 0 && log_level_rank(record.level) < filter.min_level) return false;
  if (!filter.since.empty() && record.ts < filter.since) return false;
  if (filter.grep && !std::regex_search(record.line, *filter.grep)) return false;
  return true;
}

std::vector<LogRecord> merge_logs(std::vector<std::vector<LogRecord>> runs) {
  // A k-way merge: a heap of each run's next record, earliest time (then lowest run) on top.
  using Head = std::pair<size_t, size_t>;  // run, index in it
  auto later = [&runs](const Head& a, const Head& b) {
    const std::string& ta = runs[a.first][a.second].ts;
    const std::string& tb = runs[b.first][b.second].ts;
    return ta != tb ? ta > tb : a.first > b.first;
  };
  std::priority_queue<Head, std::vector<Head>, decltype(later)> heads(later);
  size_t total = 0;
  for (size_t r = 0; r < runs.size(); ++r) {
    total += runs[r].size();
    if (!runs[r].empty()) heads.push({r, 0});
  }
  std::vector<LogRecord> out;
  out.reserve(total);
  while (!heads.empty()) {
    const auto [run, index] = heads.top();
    heads.pop();
    out.push_back(std::move(runs[run][index]));
    if (index + 1 < runs[run].size()) heads.push({run, index + 1});
  }
  return out;
}

std::string format_log_record(const LogRecord& record) {
  return record.ts + " rank " + std::to_string(record.rank) + " " + record.node +
         (record.stream == "stderr" ? " err" : "") + " | " + record.line;
}

}  // namespace kiln::sched

// The simulator's input files: strict CSV readers with errors naming file:line and column.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>

#include <kiln/sched/sim.h>

namespace kiln::sched {
namespace {

// Splits `text` into rows of fields. The files are plain (names, numbers): quoting is refused
// rather than half-supported.
class CsvReader {
 public:
  CsvReader(std::string_view text, std::string source, std::vector<std::string> columns)
      : text_(text), source_(std::move(source)), columns_(std::move(columns)) {}

  // The header must name exactly the columns, in order.
  Status header() {
    std::vector<std::string> fields;
    if (!next(&fields)) return Status::invalid_argument(source_ + ": empty file (no header)");
    std::string want;
    for (const std::string& c : columns_)
      want += (want.empty() ? "" : ",") + c;
    if (fields != columns_) {
      std::string got;
      for (const std::string& f : fields)
        got += (got.empty() ? "" : ",") + f;
      return Status::invalid_argument(source_ + ":1: header is '" + got + "', want '" + want + "'");
    }
    return Status();
  }

  // The next data row (blank lines skipped); false at the end.
  bool next(std::vector<std::string>* fields) {
    while (pos_ < text_.size()) {
      size_t end = text_.find('\n', pos_);
      if (end == std::string_view::npos) end = text_.size();
      std::string_view line = text_.substr(pos_, end - pos_);
      pos_ = end + 1;
      ++line_;
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      if (line.empty()) continue;
      fields->clear();
      size_t start = 0;
      while (true) {
        const size_t comma = line.find(',', start);
        fields->emplace_back(line.substr(
            start, comma == std::string_view::npos ? line.size() - start : comma - start));
        if (comma == std::string_view::npos) break;
        start = comma + 1;
      }
      return true;
    }
    return false;
  }

  // "file:line: column 'x': message"
  Status error(size_t column, const std::string& message) const {
    return Status::invalid_argument(source_ + ":" + std::to_string(line_) + ": column '" +
                                    columns_[column] + "': " + message);
  }
  Status row_error(const std::string& message) const {
    return Status::invalid_argument(source_ + ":" + std::to_string(line_) + ": " + message);
  }
  size_t width() const { return columns_.size(); }

 private:
  std::string_view text_;
  std::string source_;
  std::vector<std::string> columns_;
  size_t pos_ = 0;
  size_t line_ = 0;
};

bool plain_name(const std::string& s) {
  if (s.empty() || s.size() > 128) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
  });
}

// An integer in [lo, hi]; empty allowed only when `fallback` is given.
Result<int64_t> integer(const CsvReader& r, const std::vector<std::string>& f, size_t col,
                        int64_t lo, int64_t hi, std::optional<int64_t> fallback = std::nullopt) {
  const std::string& s = f[col];
  if (s.empty()) {
    if (fallback) return *fallback;
    return r.error(col, "is empty");
  }
  int64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size()) {
    return r.error(col, "'" + s + "' is not an integer");
  }
  if (v < lo || v > hi) {
    return r.error(col, std::to_string(v) + " is outside [" + std::to_string(lo) + ", " +
                            std::to_string(hi) + "]");
  }
  return v;
}

Result<double> number(const CsvReader& r, const std::vector<std::string>& f, size_t col, double lo,
                      double hi, std::optional<double> fallback = std::nullopt) {
  const std::string& s = f[col];
  if (s.empty()) {
    if (fallback) return *fallback;
    return r.error(col, "is empty");
  }
  double v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || !std::isfinite(v)) {
    return r.error(col, "'" + s + "' is not a number");
  }
  if (v < lo || v > hi) {
    return r.error(col, s + " is outside [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  return v;
}

Status check_width(const CsvReader& r, const std::vector<std::string>& f) {
  if (f.size() == r.width()) return Status();
  return r.row_error(std::to_string(f.size()) + " field(s), the header has " +
                     std::to_string(r.width()) + (f.size() > r.width() ? " (extra column)" : ""));
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string part;
  while (std::getline(in, part, sep))
    out.push_back(part);
  if (!s.empty() && s.back() == sep) out.emplace_back();
  return out;
}

constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int64_t kCountMax = 1'000'000;
constexpr int64_t kMemoryMibMax = int64_t{1} << 32;  // 4 PiB: a typo, not a node
constexpr double kSecondsMax = 100.0 * 365 * 86400;  // a century of simulated time

Result<std::string> read_file(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::not_found(std::string(what) + " file " + path + ": cannot open");
  in.seekg(0, std::ios::end);
  const auto size = static_cast<size_t>(std::max<std::streamoff>(in.tellg(), 0));
  if (size > kSimCsvBytesMax) {
    return Status::invalid_argument(std::string(what) + " file " + path + ": " +
                                    std::to_string(size) + " bytes, more than the " +
                                    std::to_string(kSimCsvBytesMax >> 20) + " MiB bound");
  }
  in.seekg(0);
  std::string text(size, '\0');
  in.read(text.data(), static_cast<std::streamsize>(size));
  if (!in) return Status::io_error(std::string(what) + " file " + path + ": read failed");
  return text;
}

}  // namespace

Result<std::vector<NodeView>> parse_nodes_csv(std::string_view text, const std::string& source) {
  CsvReader r(text, source, {"name", "cpus", "memory_mib", "gpus", "gpu_model", "domain"});
  KILN_RETURN_IF_ERROR(r.header());
  std::vector<NodeView> nodes;
  std::set<std::string> names;
  std::vector<std::string> f;
  while (r.next(&f)) {
    KILN_RETURN_IF_ERROR(check_width(r, f));
    if (nodes.size() >= kSimNodesMax) {
      return r.row_error("more than " + std::to_string(kSimNodesMax) + " nodes");
    }
    NodeView n;
    if (!plain_name(f[0])) return r.error(0, "'" + f[0] + "' is not a plain name");
    if (!names.insert(f[0]).second) return r.error(0, "node " + f[0] + " appears twice");
    n.name = f[0];
    KILN_ASSIGN_OR_RETURN(n.capacity.cpus, integer(r, f, 1, 1, kCountMax));
    KILN_ASSIGN_OR_RETURN(int64_t mib, integer(r, f, 2, 1, kMemoryMibMax));
    n.capacity.memory_bytes = mib * kMiB;
    KILN_ASSIGN_OR_RETURN(n.capacity.gpus, integer(r, f, 3, 0, 1024));
    if (!f[4].empty() && !plain_name(f[4])) return r.error(4, "'" + f[4] + "' is not a model name");
    if (n.capacity.gpus > 0 && f[4].empty()) return r.error(4, "is empty but the node has GPUs");
    n.gpu_model = f[4];
    if (!f[5].empty()) {
      n.domain = split(f[5], '/');
      for (const std::string& d : n.domain)
        if (!plain_name(d)) return r.error(5, "'" + f[5] + "' is not a path like r1/s3");
    }
    nodes.push_back(std::move(n));
  }
  if (nodes.empty()) return Status::invalid_argument(source + ": no nodes");
  return nodes;
}

Result<std::vector<SimJob>> parse_jobs_csv(std::string_view text, const std::string& source) {
  CsvReader r(text, source,
              {"name", "submit_s", "duration_s", "time_limit_s", "nodes", "cpus_per_node",
               "memory_mib_per_node", "gpus_per_node", "gpu_model", "queue", "priority"});
  KILN_RETURN_IF_ERROR(r.header());
  std::vector<SimJob> jobs;
  std::set<std::string> names;
  std::vector<std::string> f;
  while (r.next(&f)) {
    KILN_RETURN_IF_ERROR(check_width(r, f));
    if (jobs.size() >= kSimJobsMax) {
      return r.row_error("more than " + std::to_string(kSimJobsMax) + " jobs");
    }
    SimJob s;
    JobView& j = s.job;
    if (!plain_name(f[0])) return r.error(0, "'" + f[0] + "' is not a plain name");
    if (!names.insert(f[0]).second) return r.error(0, "job " + f[0] + " appears twice");
    j.id = f[0];
    j.seq = static_cast<int64_t>(jobs.size());
    KILN_ASSIGN_OR_RETURN(j.submit_s, number(r, f, 1, 0, kSecondsMax));
    KILN_ASSIGN_OR_RETURN(s.duration_s, number(r, f, 2, 0, kSecondsMax));
    if (s.duration_s <= 0) return r.error(2, "must be positive");
    KILN_ASSIGN_OR_RETURN(j.time_limit_s, number(r, f, 3, 0, kSecondsMax));
    if (j.time_limit_s <= 0) return r.error(3, "must be positive");
    KILN_ASSIGN_OR_RETURN(int64_t nodes, integer(r, f, 4, 1, static_cast<int64_t>(kSimNodesMax)));
    j.nodes = j.min_nodes = static_cast<int>(nodes);
    KILN_ASSIGN_OR_RETURN(j.per_node.cpus, integer(r, f, 5, 0, kCountMax));
    KILN_ASSIGN_OR_RETURN(int64_t mib, integer(r, f, 6, 0, kMemoryMibMax));
    j.per_node.memory_bytes = mib * kMiB;
    KILN_ASSIGN_OR_RETURN(j.per_node.gpus, integer(r, f, 7, 0, 1024));
    if (!f[8].empty()) {
      j.gpu_models = split_gpu_models(f[8]);
      for (const std::string& m : j.gpu_models)
        if (!plain_name(m)) return r.error(8, "'" + f[8] + "' is not a model or A|B list");
    }
    j.queue = f[9].empty() ? "default" : f[9];
    if (!plain_name(j.queue)) return r.error(9, "'" + f[9] + "' is not a plain name");
    KILN_ASSIGN_OR_RETURN(int64_t priority, integer(r, f, 10, -1'000'000, 1'000'000, 0));
    j.priority = static_cast<int>(priority);
    jobs.push_back(std::move(s));
  }
  if (jobs.empty()) return Status::invalid_argument(source + ": no jobs");
  return jobs;
}

Result<std::vector<QueueSpec>> parse_queues_csv(std::string_view text, const std::string& source) {
  CsvReader r(text, source,
              {"name", "team", "cohort", "weight", "quota_nodes", "quota_cpus", "quota_gpus",
               "borrow_nodes", "borrow_cpus", "borrow_gpus"});
  KILN_RETURN_IF_ERROR(r.header());
  std::vector<QueueSpec> queues;
  std::set<std::string> names;
  std::vector<std::string> f;
  while (r.next(&f)) {
    KILN_RETURN_IF_ERROR(check_width(r, f));
    if (queues.size() >= 1000) return r.row_error("more than 1000 queues");
    QueueSpec q;
    if (!plain_name(f[0])) return r.error(0, "'" + f[0] + "' is not a plain name");
    if (!names.insert(f[0]).second) return r.error(0, "queue " + f[0] + " appears twice");
    q.name = f[0];
    if (!f[1].empty() && !plain_name(f[1])) return r.error(1, "'" + f[1] + "' is not a plain name");
    q.team = f[1];
    if (!f[2].empty() && !plain_name(f[2])) return r.error(2, "'" + f[2] + "' is not a plain name");
    q.cohort = f[2];
    KILN_ASSIGN_OR_RETURN(q.weight, number(r, f, 3, 1e-6, 1e6, 1.0));
    QuotaVector quota, borrow;
    KILN_ASSIGN_OR_RETURN(quota.nodes, integer(r, f, 4, 0, kCountMax, -1));
    KILN_ASSIGN_OR_RETURN(quota.cpus, integer(r, f, 5, 0, int64_t{1} << 40, -1));
    KILN_ASSIGN_OR_RETURN(quota.gpus, integer(r, f, 6, 0, int64_t{1} << 40, -1));
    KILN_ASSIGN_OR_RETURN(borrow.nodes, integer(r, f, 7, 0, kCountMax, 0));
    KILN_ASSIGN_OR_RETURN(borrow.cpus, integer(r, f, 8, 0, int64_t{1} << 40, 0));
    KILN_ASSIGN_OR_RETURN(borrow.gpus, integer(r, f, 9, 0, int64_t{1} << 40, 0));
    q.quota["default"] = quota;
    q.borrow["default"] = borrow;
    queues.push_back(std::move(q));
  }
  return queues;
}

Result<Trace> load_trace(const std::string& nodes_path, const std::string& jobs_path,
                         const std::string& queues_path) {
  Trace t;
  KILN_ASSIGN_OR_RETURN(std::string nodes, read_file(nodes_path, "nodes"));
  KILN_ASSIGN_OR_RETURN(t.nodes, parse_nodes_csv(nodes, nodes_path));
  KILN_ASSIGN_OR_RETURN(std::string jobs, read_file(jobs_path, "jobs"));
  KILN_ASSIGN_OR_RETURN(t.jobs, parse_jobs_csv(jobs, jobs_path));
  if (!queues_path.empty()) {
    KILN_ASSIGN_OR_RETURN(std::string queues, read_file(queues_path, "queues"));
    KILN_ASSIGN_OR_RETURN(t.queues, parse_queues_csv(queues, queues_path));
    std::set<std::string> known;
    for (const QueueSpec& q : t.queues)
      known.insert(q.name);
    for (const SimJob& j : t.jobs) {
      if (known.count(j.job.queue) == 0) {
        return Status::invalid_argument(jobs_path + ": job " + j.job.id + " names queue '" +
                                        j.job.queue + "', which " + queues_path + " lacks");
      }
    }
  }
  return t;
}

}  // namespace kiln::sched

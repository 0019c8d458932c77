// `kiln logs` (cmd_logs.h): one rank's log, or every rank's merged in time order.
#include "cli/cmd_logs.h"

#include <algorithm>
#include <chrono>
#include <deque>
#include <iostream>
#include <regex>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include <kiln/base/clock.h>
#include <kiln/sched/duration.h>
#include <kiln/sched/log_merge.h>

#include "cli/client.h"

namespace kiln::cli {
namespace {

using json = nlohmann::json;

constexpr int64_t kFollowPollMs = 500;

struct LogsOptions {
  std::string job;
  int rank = -1;  // -1: every rank
  int attempt = -1;
  bool follow = false;
  std::string level;
  std::string grep;
  std::string since;
};

// One rank's place in its log and the records read but not yet printed.
struct RankCursor {
  int rank = 0;
  std::string node;
  int64_t offset = 0;
  std::deque<sched::LogRecord> buffered;
  bool drained = false;  // its last read returned nothing new
  bool unreadable = false;
  bool warned = false;  // its read error was said
};

bool terminal(const std::string& state) {
  return state == "succeeded" || state == "failed" || state == "cancelled";
}

// Reads one chunk of a rank's log into its buffer. An error for one rank (its agent is gone)
// is said once on stderr and the other ranks go on.
Status read_chunk(obs::HttpClient& http, const LogsOptions& o, int attempt, RankCursor* c) {
  const std::string path = "/v1/jobs/" + o.job + "/logs?rank=" + std::to_string(c->rank) +
                           "&offset=" + std::to_string(c->offset) +
                           "&attempt=" + std::to_string(attempt);
  Result<obs::HttpResponse> r = http.get(path);
  if (!r.ok()) return r.status();
  const json body = json::parse(r->body, nullptr, /*allow_exceptions=*/false);
  if (r->status != 200 || !body.is_object()) {
    const std::string why = body.is_object() && body.contains("error") && body["error"].is_string()
                                ? body["error"].get<std::string>()
                                : "HTTP " + std::to_string(r->status);
    return Status::unavailable(why);
  }
  const int64_t next = body.value("next", c->offset);
  c->drained = next == c->offset;
  c->offset = next;
  if (body.contains("node") && body["node"].is_string()) c->node = body["node"].get<std::string>();
  if (body.contains("skipped_bytes") && body["skipped_bytes"].is_number_integer() &&
      body["skipped_bytes"].get<int64_t>() > 0) {
    std::cerr << "kiln logs: rank " << c->rank << ": " << body["skipped_bytes"].get<int64_t>()
              << " bytes were rotated away before they could be read\n";
  }
  if (!body.contains("lines") || !body["lines"].is_array()) return Status();
  for (const json& line : body["lines"]) {
    Result<sched::LogRecord> rec = sched::parse_log_record(line, c->node);
    if (rec.ok()) c->buffered.push_back(std::move(*rec));
  }
  return Status();
}

int run_logs(const ClientFlags& flags, const LogsOptions& o) {
  Client c = connect(flags, "logs");
  if (!c.http) return c.error;
  sched::LogFilter filter;
  if (!o.level.empty()) {
    filter.min_level = sched::log_level_rank(o.level);
    if (filter.min_level < 0) {
      return report_error("logs", Status::invalid_argument("--level '" + o.level +
                                                           "': one of debug, info, warn, error"));
    }
  }
  if (!o.grep.empty()) {
    try {
      filter.grep = std::regex(o.grep, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      return report_error("logs", Status::invalid_argument("--grep '" + o.grep + "': " + e.what()));
    }
  }
  if (!o.since.empty()) {
    // A duration back from now ("10m"), or a time as the records write it.
    Result<int64_t> ms = sched::parse_duration_ms(o.since);
    if (ms.ok()) {
      filter.since = format_wall_time_utc(system_clock().wall_ns() - *ms * 1'000'000);
    } else if (o.since.size() >= 20 && o.since[4] == '-' && o.since[10] == 'T' &&
               o.since.back() == 'Z') {
      // The records' form has microseconds: "...T10:00:00Z" is "...T10:00:00.000000Z" (text
      // order is time order only at one width).
      filter.since = o.since.find('.') == std::string::npos
                         ? o.since.substr(0, o.since.size() - 1) + ".000000Z"
                         : o.since;
    } else {
      return report_error("logs",
                          Status::invalid_argument("--since '" + o.since +
                                                   "': a duration (30s, 10m, 2h) or a UTC time "
                                                   "(2026-12-06T10:00:00Z)"));
    }
  }
  int code = 0;
  Result<json> st = call(c.http->get("/v1/jobs/" + o.job), 200, "logs", &code);
  if (!st.ok()) return code;
  const int attempt = o.attempt >= 0 ? o.attempt : st->value("attempt", 0);
  // The ranks and their nodes: the current attempt's from its status, an earlier one's from the
  // event that placed it (a shrunk restart has fewer nodes than the attempt before it).
  std::vector<RankCursor> cursors;
  json nodes = (*st)["nodes"];
  if (attempt != st->value("attempt", 0)) {
    Result<json> events =
        call(c.http->get("/v1/jobs/" + o.job + "/events?limit=10000"), 200, "logs", &code);
    if (!events.ok()) return code;
    nodes = json::array();
    for (const json& e : (*events)["events"]) {
      if (e.value("type", "") == "placed" && e.value("attempt", -1) == attempt &&
          e.contains("nodes") && e["nodes"].is_array()) {
        nodes = e["nodes"];
      }
    }
  }
  const int per_node =
      std::max(1, st->contains("spec") ? (*st)["spec"].value("ranks_per_node", 1) : 1);
  const int world = nodes.is_array() ? static_cast<int>(nodes.size()) * per_node : 0;
  for (int r = 0; r < world; ++r) {
    if (o.rank >= 0 && r != o.rank) continue;
    RankCursor cur;
    cur.rank = r;
    const json& n = nodes[static_cast<size_t>(r / per_node)];
    cur.node = n.is_string() ? n.get<std::string>() : "?";
    cursors.push_back(std::move(cur));
  }
  if (o.rank >= world && o.rank >= 0) {
    return report_error(
        "logs", Status::not_found("job " + o.job + " has ranks 0.." + std::to_string(world - 1) +
                                  ", not " + std::to_string(o.rank)));
  }
  if (cursors.empty()) {
    return report_error("logs", Status::not_found("job " + o.job + " has no ranks yet (" +
                                                  st->value("state", std::string("?")) + ")"));
  }
  while (true) {
    // Refill every rank whose buffer is empty, then print what is safe: every record up to the
    // earliest newest-buffered time of a rank that may have more (a later read of that rank
    // cannot bring anything earlier).
    bool any_new = false;
    for (RankCursor& cur : cursors) {
      if (cur.unreadable || cur.drained || !cur.buffered.empty()) continue;
      Status s = read_chunk(*c.http, o, attempt, &cur);
      if (!s.ok()) {
        // Said once; following, it is tried again each round (a rank not started yet).
        if (!cur.warned) {
          std::cerr << "kiln logs: rank " << cur.rank << " on " << cur.node << ": " << s.message()
                    << "\n";
          cur.warned = true;
        }
        cur.unreadable = true;
        continue;
      }
      any_new = any_new || !cur.buffered.empty();
    }
    // A rank read but with nothing parsable yet, and more to come: its next read may hold
    // earlier records than the others' buffers, so nothing is printed until it is read again.
    const bool waiting = std::any_of(cursors.begin(), cursors.end(), [](const RankCursor& cur) {
      return !cur.unreadable && !cur.drained && cur.buffered.empty();
    });
    if (waiting) continue;
    std::string horizon;
    bool bounded = false;
    for (const RankCursor& cur : cursors) {
      if (cur.unreadable || cur.drained || cur.buffered.empty()) continue;
      if (!bounded || cur.buffered.back().ts < horizon) horizon = cur.buffered.back().ts;
      bounded = true;
    }
    std::vector<std::vector<sched::LogRecord>> runs;
    for (RankCursor& cur : cursors) {
      std::vector<sched::LogRecord> run;
      while (!cur.buffered.empty() && (!bounded || cur.buffered.front().ts <= horizon)) {
        run.push_back(std::move(cur.buffered.front()));
        cur.buffered.pop_front();
      }
      runs.push_back(std::move(run));
    }
    for (const sched::LogRecord& rec : sched::merge_logs(std::move(runs))) {
      if (!sched::log_matches(rec, filter)) continue;
      if (flags.json) {
        std::cout << json{{"ts", rec.ts},         {"rank", rec.rank},   {"node", rec.node},
                          {"stream", rec.stream}, {"level", rec.level}, {"line", rec.line}}
                         .dump()
                  << "\n";
      } else if (o.rank >= 0) {
        std::cout << rec.line << "\n";  // one rank: its lines as it wrote them (pipes rely on it)
      } else {
        std::cout << sched::format_log_record(rec) << "\n";
      }
    }
    std::cout << std::flush;
    const bool all_drained = std::all_of(cursors.begin(), cursors.end(), [](const RankCursor& cur) {
      return cur.unreadable || (cur.drained && cur.buffered.empty());
    });
    if (!all_drained || any_new) continue;
    // Not one log could be read (a rank not started yet has none): that is a failure, unless
    // following, which waits for them.
    if (!o.follow && std::all_of(cursors.begin(), cursors.end(),
                                 [](const RankCursor& cur) { return cur.unreadable; })) {
      return kExitFailure;
    }
    if (!o.follow) return kExitOk;
    // Following: once every rank is read to its end, stop when the job has ended.
    Result<json> now = call(c.http->get("/v1/jobs/" + o.job), 200, "logs", &code);
    if (!now.ok()) return code;
    if (terminal(now->value("state", std::string())) || now->value("attempt", 0) != attempt) {
      return kExitOk;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(kFollowPollMs));
    for (RankCursor& cur : cursors) {
      cur.drained = false;
      cur.unreadable = false;
    }
  }
}

}  // namespace

Command add_logs_command(CLI::App& parent) {
  auto flags = std::make_shared<ClientFlags>();
  auto o = std::make_shared<LogsOptions>();
  CLI::App* app = parent.add_subcommand(
      "logs", "Print what a job's ranks wrote: every rank merged in time order, or one");
  app->add_option("job", o->job, "job id")->required();
  app->add_option("--rank", o->rank, "only this rank (default: every rank, merged)")
      ->check(CLI::Range(0, 1 << 20));
  app->add_option("--attempt", o->attempt, "the attempt (default: the current one)")
      ->check(CLI::Range(0, 1 << 30));
  app->add_option("--level", o->level,
                  "only lines at this level or above (debug, info, warn, error; a plain line is "
                  "info, a JSON line says its own)");
  app->add_option("--grep", o->grep, "only lines matching this regular expression (ECMAScript)");
  app->add_option("--since", o->since, "only lines from this long ago (10m) or this UTC time on");
  app->add_flag("--follow,-f", o->follow, "keep printing until the attempt or the job ends");
  add_client_flags(app, flags.get());
  return {app, [flags, o](const GlobalOptions&) { return run_logs(*flags, *o); }};
}

}  // namespace kiln::cli

// Every rank's log of a job as one stream (`kiln logs JOB`): records from the per-rank logs
// (rank_log.h) merged in time order, each with its rank and node, filtered by level, a pattern
// and a start time. Pure functions: the client fetches each rank's records and calls these.
//
// Ordering: each rank's records are in time order (one writer appends them); records of
// different ranks are ordered by their timestamps, which come from different agents' clocks,
// so ranks on different hosts interleave only as well as those clocks agree (NTP: well within
// a millisecond on one cluster). Equal timestamps keep rank order.
#ifndef KILN_SCHED_LOG_MERGE_H_
#define KILN_SCHED_LOG_MERGE_H_

#include <optional>
#include <regex>
#include <string>
#include <string_view>
#include <vector>

#include <kiln/base/result.h>

#include <nlohmann/json.hpp>

namespace kiln::sched {

struct LogRecord {
  std::string ts;  // "2026-11-29T19:39:50.123456Z": fixed width, so text order is time order
  int rank = 0;
  std::string node;
  std::string stream;  // stdout, stderr
  std::string line;
  // The line's own "level" when it is a JSON log record (Kiln's and most structured loggers'),
  // else "info": a plain line says nothing of its severity.
  std::string level;
};

// debug 0, info 1, warn/warning 2, error/fatal/critical 3; -1 for anything else.
int log_level_rank(std::string_view level);

// One record of a rank log (its JSON, as GET /v1/jobs/{id}/logs returns it) read by a client
// that knows the node. kInvalidArgument naming the missing or mistyped field.
Result<LogRecord> parse_log_record(const nlohmann::json& record, const std::string& node);

struct LogFilter {
  int min_level = 0;               // log_level_rank of the least severe level shown
  std::optional<std::regex> grep;  // shown only when it matches somewhere in the line
  std::string since;               // shown only from this timestamp on (same format); empty: all
};
bool log_matches(const LogRecord& record, const LogFilter& filter);

// The records of every run (each in time order) in one time order; equal times keep the runs'
// order.
std::vector<LogRecord> merge_logs(std::vector<std::vector<LogRecord>> runs);

// "2026-11-29T19:39:50.123456Z rank 1 n1 | the line" ("rank 1 n1 err |" for stderr).
std::string format_log_record(const LogRecord& record);

}  // namespace kiln::sched

#endif  // KILN_SCHED_LOG_MERGE_H_

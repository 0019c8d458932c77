// Which rank a failed attempt points at, read from the flight-recorder dumps its ranks left.
//
// A rank whose collective fails dumps its flight recorder to <dir>/flight-rank<R>.json
// (include/kiln/comm/flight_recorder.h, CommOptions::flight_recorder_dir; the node agent gives
// ranks KILN_FLIGHT_RECORDER_DIR). Each failed entry names a "culprit_rank": the dead peer, or the
// end of the chain of waits (the rank that never entered the collective); ranks that were aborted
// by a peer adopt the culprit that peer named. This file reads those dumps and picks one rank, so
// the coordinator can say "attempt 3 failed: rank 5 (host n5) stopped answering in allreduce"
// and, later, cordon the node it ran on.
//
// The vote: each dump names at most one culprit (that of its earliest failed entry that names
// one: the first failure it saw; later entries are usually the abort spreading), and the rank
// named by the most dumps wins; a tie goes to the lowest rank. Counting dumps rather than entries
// keeps one rank with a long queue of aborted ops from outvoting the others.
//
// Bounded: at most kFlightDumpFilesMax files are read (the lowest ranks), each at most
// kFlightDumpBytesMax bytes; a file over the bound, unreadable or malformed is skipped with a
// warning naming it, never fails the whole read.
#ifndef KILN_SCHED_FLIGHT_CULPRIT_H_
#define KILN_SCHED_FLIGHT_CULPRIT_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <kiln/base/result.h>

namespace kiln::sched {

// A dump holds at most CommOptions::flight_recorder_entries (1024 by default) entries of a few
// hundred bytes each, error text included: 16 MiB is 16 KiB an entry at the default.
inline constexpr size_t kFlightDumpBytesMax = 16 << 20;
// One file per rank of a job on this node's share of the directory; 4096 ranks is beyond any job
// we place on one attempt directory, and bounds the read to 4096 x 16 MiB in the worst case.
inline constexpr size_t kFlightDumpFilesMax = 4096;

struct FlightCulprit {
  int rank = -1;            // the rank the failure points at
  std::string host;         // its host, as the reporting rank knew it ("culprit_host")
  std::string op;           // the op that failed on the reporting rank ("allreduce")
  std::string error;        // that op's error text
  int reporting_rank = -1;  // whose dump the fields above come from (the lowest rank that
                            // voted for this culprit)
  int votes = 0;            // dumps that named this rank
};

struct FlightDumpReport {
  std::optional<FlightCulprit> culprit;  // none: no dump named a culprit
  int dumps_read = 0;                    // files parsed successfully
  // One line per file skipped: "<name>: <why>" (too large, unreadable, not a dump).
  std::vector<std::string> warnings;
};

// Reads every "flight-rank<R>.json" in `dir` (R decimal; temporaries like *.json.tmp are not
// dumps) and votes as described above. Errors: kNotFound when `dir` does not exist, kIoError when
// it cannot be listed; anything wrong with a single file is a warning in the report.
Result<FlightDumpReport> culprit_from_flight_dumps(const std::string& dir);

}  // namespace kiln::sched

#endif  // KILN_SCHED_FLIGHT_CULPRIT_H_

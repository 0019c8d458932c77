// Per-rank log files: what a rank printed, one JSON object per line, written by the node agent's
// RankSupervisor (rank_process.h) and read back for `kiln logs JOB --rank R [--follow]`.
//
//   {"kiln_rank_log":1,"rank":1,"start_offset":0}                         <- header, once a file
//   {"ts":"2026-11-29T19:39:50.123456Z","rank":1,"stream":"stdout","line":"step 1 ..."}
//   {"ts":"...","rank":1,"stream":"stderr","line":"<first 16 KiB>","truncated":true}
//
// Size bound and rotation: when the next record would take the file past `bytes_max`, the file is
// renamed to "<path>.1" (replacing the previous one) and a fresh "<path>" begins. At most two
// files exist, so a rank's log never takes more than about 2 x bytes_max on disk.
//
// Offsets: a reader names a place in the log by a *log offset*: the number of bytes written to
// this log (headers included) before that place, counted across rotations. Each file's header
// carries the log offset of its first byte (start_offset), so an offset maps to a file and a
// position in it without either side keeping state. Offsets a reader got from read_rank_log stay
// valid across rotations; the bytes under them disappear only when rotated out of "<path>.1",
// and then the reader is told how many it missed (skipped_bytes).
//
// What this is not: a log shipper or an index. Records are appended with one write(2) each on a
// file opened O_APPEND, so a reader sees whole lines except, briefly, the last one being written
// (the reader never returns an unterminated line).
#ifndef KILN_SCHED_RANK_LOG_H_
#define KILN_SCHED_RANK_LOG_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <kiln/base/clock.h>
#include <kiln/base/result.h>
#include <kiln/base/status.h>

namespace kiln::sched {

// A captured line is cut to this many bytes (and marked "truncated":true): a rank that prints a
// megabyte without a newline must not make the agent buffer a megabyte. 16 KiB holds any honest
// log line (a Python traceback frame, a JSON step line) many times over.
inline constexpr size_t kRankLogLineBytesMax = 16 << 10;
// The longest record: a cut line where every byte is escaped as \u00XX (6 bytes) or replaced by
// U+FFFD (3 bytes), plus the timestamp, rank and keys. 128 KiB bounds 6 x 16 KiB + ~100 bytes.
inline constexpr size_t kRankLogRecordBytesMax = 128 << 10;
static_assert(6 * kRankLogLineBytesMax + 1024 <= kRankLogRecordBytesMax);
// Smallest size bound a writer accepts: a few records per file, so rotation is not every line.
inline constexpr int64_t kRankLogBytesMaxMin = 4096;

enum class RankStream { kStdout, kStderr };
std::string_view rank_stream_name(RankStream stream);  // "stdout", "stderr"

struct RankLogOptions {
  std::string path;                // the log; its directory must exist
  int rank = 0;                    // written into every record
  int64_t bytes_max = 64LL << 20;  // rotate before a record would pass this; >= kRankLogBytesMaxMin
  const Clock* clock = &system_clock();  // the records' "ts"; not owned, outlives the writer
};

// Appends records to one rank's log. Not thread-safe: the supervisor's thread is its one user.
class RankLogWriter {
 public:
  // Opens options.path for appending, creating it (mode 0640) with a header when it is absent or
  // empty. An existing log is continued: its header gives the log offset of its start.
  // Errors: kInvalidArgument (bytes_max), kIoError/kNotFound naming the path, kCorruption when an
  // existing non-empty file does not start with a rank-log header (it is not ours to append to).
  static Result<std::unique_ptr<RankLogWriter>> open(const RankLogOptions& options);
  ~RankLogWriter();
  RankLogWriter(const RankLogWriter&) = delete;
  RankLogWriter& operator=(const RankLogWriter&) = delete;

  // Appends one record for `line` (no trailing newline; at most kRankLogLineBytesMax bytes, longer
  // is cut here too). Invalid UTF-8 is replaced by U+FFFD. Rotates first when the record would
  // take the file past bytes_max. On an error (a full disk) the record is lost and the error is
  // returned; later records are still tried.
  Status append(RankStream stream, std::string_view line, bool truncated);

  const std::string& path() const { return options_.path; }
  // The log offset just past the last record written: everything before it is in the files.
  int64_t end_offset() const { return start_offset_ + file_bytes_; }
  int rotations() const { return rotations_; }

 private:
  explicit RankLogWriter(RankLogOptions options) : options_(std::move(options)) {}
  Status open_fresh(int64_t start_offset);  // creates (truncates) path and writes its header
  Status rotate();

  const RankLogOptions options_;
  int fd_ = -1;
  int64_t start_offset_ = 0;  // log offset of the current file's first byte
  int64_t file_bytes_ = 0;    // bytes in the current file
  int64_t header_bytes_ = 0;  // of which its header line
  int rotations_ = 0;
};

// What read_rank_log found.
struct RankLogChunk {
  // Complete records in order, each without its newline; header lines are left out.
  std::vector<std::string> lines;
  // Where the next read continues (pass it back as `offset`); equals the offset given when there
  // was nothing new.
  int64_t next_offset = 0;
  // Bytes between the offset given and the first line returned that were rotated away (0 when
  // nothing was lost).
  int64_t skipped_bytes = 0;
};

// Reads complete records from log offset `offset` of the log at `path` (and "<path>.1"), at most
// `bytes_max` bytes of them (newlines counted).
//   - offset 0 is the log's beginning; other offsets must come from a previous next_offset (an
//     offset inside a record returns that record's tail as its first line).
//   - an offset before what the two files still hold starts at the oldest record kept, and
//     skipped_bytes says how much was lost; an offset past the end returns nothing, with
//     next_offset clamped to the end.
//   - reading crosses from "<path>.1" into "<path>" in one call when the budget allows.
// Safe while a writer appends and rotates: each file is read through one open descriptor, whose
// header and bytes belong together even if the name moves meanwhile; a rotation between the two
// opens shows up as skipped_bytes, never as a wrong line.
// Errors: kInvalidArgument for offset < 0 or bytes_max < kRankLogRecordBytesMax (a record must
// fit), kNotFound when "<path>" does not exist, kCorruption for a file without a valid header or a
// record longer than kRankLogRecordBytesMax, kIoError naming the path.
Result<RankLogChunk> read_rank_log(const std::string& path, int64_t offset, size_t bytes_max);

}  // namespace kiln::sched

#endif  // KILN_SCHED_RANK_LOG_H_

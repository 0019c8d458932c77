// See include/kiln/sched/rank_log.h.
//
// A file is a header line then records. The header is JSON like the records, so `cat` and `jq`
// read a log file as it is; the reader recognises it by its "kiln_rank_log" key and leaves it out.
#include <kiln/base/file_system.h>
#include <kiln/base/json.h>
#include <kiln/sched/rank_log.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <optional>
#include <string>

namespace kiln::sched {
namespace {

// A header is about 60 bytes; anything without a newline in the first 256 is not one.
constexpr size_t kHeaderBytesMax = 256;
constexpr int kFormatVersion = 1;

// Closes the descriptor it holds when it goes.
class FileFd {
 public:
  explicit FileFd(int fd) : fd_(fd) {}
  ~FileFd() {
    if (fd_ >= 0) close(fd_);
  }
  FileFd(const FileFd&) = delete;
  FileFd& operator=(const FileFd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

std::string header_line(int rank, int64_t start_offset) {
  nlohmann::ordered_json j;
  j["kiln_rank_log"] = kFormatVersion;
  j["rank"] = rank;
  j["start_offset"] = start_offset;
  return j.dump() + "\n";
}

// Reads exactly up to `size` bytes at `offset` (fewer only at end of file). Retries EINTR.
Result<size_t> pread_full(int fd, char* data, size_t size, int64_t offset,
                          const std::string& path) {
  size_t got = 0;
  while (got < size) {
    const ssize_t n = pread(fd, data + got, size - got, static_cast<off_t>(offset) + got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return os_error(path, "pread", errno);
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  return got;
}

// Writes all of `data`; on a failure, *written says how much went out. Retries EINTR.
Status write_full(int fd, std::string_view data, const std::string& path, size_t* written) {
  *written = 0;
  while (*written < data.size()) {
    const ssize_t n = write(fd, data.data() + *written, data.size() - *written);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return os_error(path, "write", errno);
    if (n == 0) return os_error(path, "write", ENOSPC);
    *written += static_cast<size_t>(n);
  }
  return Status();
}

// The header of an open log file.
struct Header {
  int64_t start_offset = 0;  // log offset of the file's first byte
  int64_t bytes = 0;         // the header line, newline included
};

Result<Header> read_header(int fd, const std::string& path) {
  char buf[kHeaderBytesMax];
  KILN_ASSIGN_OR_RETURN(const size_t got, pread_full(fd, buf, sizeof buf, 0, path));
  const std::string_view head(buf, got);
  const size_t newline = head.find('\n');
  if (newline == std::string_view::npos) {
    return Status::corruption(path + ": no rank-log header line in its first " +
                              std::to_string(got) + " bytes");
  }
  Result<nlohmann::json> j = parse_json_bounded(head.substr(0, newline), {kHeaderBytesMax, 2},
                                                path + ": header", StatusCode::kCorruption);
  if (!j.ok()) return j.status();
  const auto version = j->find("kiln_rank_log");
  const auto start = j->find("start_offset");
  if (!j->is_object() || version == j->end() || *version != kFormatVersion || start == j->end() ||
      !start->is_number_integer() || start->get<int64_t>() < 0) {
    return Status::corruption(path + ": not a rank-log header (version " +
                              std::to_string(kFormatVersion) +
                              "): " + std::string(head.substr(0, newline)));
  }
  return Header{start->get<int64_t>(), static_cast<int64_t>(newline + 1)};
}

}  // namespace

std::string_view rank_stream_name(RankStream stream) {
  return stream == RankStream::kStdout ? "stdout" : "stderr";
}

// ---------------------------------------------------------------------------------------------
// Writer

Result<std::unique_ptr<RankLogWriter>> RankLogWriter::open(const RankLogOptions& options) {
  if (options.bytes_max < kRankLogBytesMaxMin) {
    return Status::invalid_argument("rank log " + options.path + ": size bound " +
                                    std::to_string(options.bytes_max) + " bytes is below the " +
                                    std::to_string(kRankLogBytesMaxMin) + " minimum");
  }
  if (options.clock == nullptr) return Status::invalid_argument("rank log: no clock");
  std::unique_ptr<RankLogWriter> w(new RankLogWriter(options));
  // O_RDWR: the header of an existing log is read through the same descriptor.
  w->fd_ = ::open(options.path.c_str(), O_RDWR | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
  if (w->fd_ < 0) return os_error(options.path, "open", errno);
  struct stat st {};
  if (fstat(w->fd_, &st) != 0) return os_error(options.path, "fstat", errno);
  if (!S_ISREG(st.st_mode)) return Status::invalid_argument(options.path + ": not a regular file");
  if (st.st_size == 0) {
    size_t written = 0;
    const std::string header = header_line(options.rank, 0);
    KILN_RETURN_IF_ERROR(write_full(w->fd_, header, options.path, &written));
    w->file_bytes_ = w->header_bytes_ = static_cast<int64_t>(written);
    return w;
  }
  KILN_ASSIGN_OR_RETURN(const Header header, read_header(w->fd_, options.path));
  w->start_offset_ = header.start_offset;
  w->header_bytes_ = header.bytes;
  w->file_bytes_ = st.st_size;
  // A record cut short by a crash would swallow the next one; end it on its own line.
  char last = '\n';
  KILN_ASSIGN_OR_RETURN(const size_t got,
                        pread_full(w->fd_, &last, 1, st.st_size - 1, options.path));
  if (got == 1 && last != '\n') {
    size_t written = 0;
    KILN_RETURN_IF_ERROR(write_full(w->fd_, "\n", options.path, &written));
    w->file_bytes_ += static_cast<int64_t>(written);
  }
  return w;
}

RankLogWriter::~RankLogWriter() {
  if (fd_ >= 0) close(fd_);
}

Status RankLogWriter::open_fresh(int64_t start_offset) {
  if (fd_ >= 0) close(fd_);
  fd_ = ::open(options_.path.c_str(), O_RDWR | O_APPEND | O_CREAT | O_TRUNC | O_CLOEXEC, 0640);
  start_offset_ = start_offset;
  file_bytes_ = header_bytes_ = 0;
  if (fd_ < 0) return os_error(options_.path, "open", errno);
  size_t written = 0;
  Status s = write_full(fd_, header_line(options_.rank, start_offset), options_.path, &written);
  file_bytes_ = header_bytes_ = static_cast<int64_t>(written);
  return s;
}

Status RankLogWriter::rotate() {
  const std::string old = options_.path + ".1";
  // rename() replaces the previous ".1" in one step: a reader sees the old one or the new one.
  if (std::rename(options_.path.c_str(), old.c_str()) != 0) {
    return os_error(options_.path, "rename to " + old, errno);
  }
  ++rotations_;
  return open_fresh(start_offset_ + file_bytes_);
}

Status RankLogWriter::append(RankStream stream, std::string_view line, bool truncated) {
  if (line.size() > kRankLogLineBytesMax) {
    line = line.substr(0, kRankLogLineBytesMax);
    truncated = true;
  }
  nlohmann::ordered_json j;
  j["ts"] = format_wall_time_utc(options_.clock->wall_ns());
  j["rank"] = options_.rank;
  j["stream"] = rank_stream_name(stream);
  j["line"] = std::string(line);
  if (truncated) j["truncated"] = true;
  // replace: a byte that is not UTF-8 becomes U+FFFD instead of an exception.
  std::string record = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  record += '\n';
  // The reader and the size bound rely on this; the constants above make it hold.
  if (record.size() > kRankLogRecordBytesMax) {
    return Status::invalid_argument("rank log record of " + std::to_string(record.size()) +
                                    " bytes exceeds its bound");
  }
  const bool has_records = fd_ >= 0 && file_bytes_ > header_bytes_;
  if (fd_ < 0 ||
      (has_records && file_bytes_ + static_cast<int64_t>(record.size()) > options_.bytes_max)) {
    // fd_ < 0: an earlier rotation failed half-way; try again (the name may be free now).
    KILN_RETURN_IF_ERROR(fd_ < 0 ? open_fresh(start_offset_ + file_bytes_) : rotate());
  }
  size_t written = 0;
  Status s = write_full(fd_, record, options_.path, &written);
  file_bytes_ += static_cast<int64_t>(written);
  return s;
}

// ---------------------------------------------------------------------------------------------
// Reader
//
// read_rank_log maps the log offset to a file by the files' headers:
//   cur = "<path>" (start C), old = "<path>.1" (start O <= C, its bytes end at C when no rotation
//   raced the read). offset >= C: read cur at offset - C. O <= offset < C: read old at offset - O
//   up to its end, then go on in cur from C. offset < O: start at O, skipped_bytes = O - offset.

namespace {

// One open log file.
struct LogFile {
  std::unique_ptr<FileFd> fd;
  Header header;
  int64_t size = 0;
  int64_t end_offset() const { return header.start_offset + size; }
};

// Opens `path`; an absent file gives an empty optional.
Result<std::optional<LogFile>> open_log_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0 && errno == ENOENT) return std::optional<LogFile>();
  if (fd < 0) return os_error(path, "open", errno);
  LogFile f;
  f.fd = std::make_unique<FileFd>(fd);
  struct stat st {};
  if (fstat(fd, &st) != 0) return os_error(path, "fstat", errno);
  if (!S_ISREG(st.st_mode)) return Status::corruption(path + ": not a regular file");
  KILN_ASSIGN_OR_RETURN(f.header, read_header(fd, path));
  f.size = st.st_size;
  return std::optional<LogFile>(std::move(f));
}

// Appends the complete records of `file` from log offset `offset` to `chunk`, spending at most
// *budget bytes; returns the log offset just past the last record taken.
Result<int64_t> read_records(const LogFile& file, const std::string& path, int64_t offset,
                             size_t* budget, RankLogChunk* chunk) {
  int64_t pos = std::max(offset - file.header.start_offset, file.header.bytes);
  pos = std::min(pos, file.size);
  const size_t want = static_cast<size_t>(std::min<int64_t>(file.size - pos, *budget));
  std::string buf(want, '\0');
  KILN_ASSIGN_OR_RETURN(const size_t got, pread_full(file.fd->get(), buf.data(), want, pos, path));
  buf.resize(got);
  const size_t end = buf.rfind('\n');
  if (end == std::string::npos) {
    // Nothing complete: either the writer is mid-record, or a record is longer than the budget,
    // which (budget >= kRankLogRecordBytesMax) only a file we did not write can have.
    if (got == *budget && got >= kRankLogRecordBytesMax) {
      return Status::corruption(path + ": no newline in " + std::to_string(got) +
                                " bytes at log offset " +
                                std::to_string(file.header.start_offset + pos));
    }
    return file.header.start_offset + pos;
  }
  size_t begin = 0;
  while (begin <= end) {
    const size_t nl = buf.find('\n', begin);
    chunk->lines.emplace_back(buf, begin, nl - begin);
    begin = nl + 1;
  }
  *budget -= end + 1;
  return file.header.start_offset + pos + static_cast<int64_t>(end + 1);
}

}  // namespace

Result<RankLogChunk> read_rank_log(const std::string& path, int64_t offset, size_t bytes_max) {
  if (offset < 0) {
    return Status::invalid_argument("rank log " + path + ": negative offset " +
                                    std::to_string(offset));
  }
  if (bytes_max < kRankLogRecordBytesMax) {
    return Status::invalid_argument("rank log " + path + ": read budget " +
                                    std::to_string(bytes_max) + " is below one record's bound " +
                                    std::to_string(kRankLogRecordBytesMax));
  }
  KILN_ASSIGN_OR_RETURN(std::optional<LogFile> cur, open_log_file(path));
  if (!cur) return Status::not_found(path + ": no such rank log");
  RankLogChunk chunk;
  size_t budget = bytes_max;
  const int64_t cur_start = cur->header.start_offset;
  if (offset < cur_start) {
    const std::string old_path = path + ".1";
    KILN_ASSIGN_OR_RETURN(std::optional<LogFile> old, open_log_file(old_path));
    // An old file that does not start before the current one was renamed by a rotation that
    // raced this read (it is what `cur` was); what it held before is gone.
    if (old && old->header.start_offset < cur_start) {
      if (offset < old->header.start_offset) {
        chunk.skipped_bytes += old->header.start_offset - offset;
        offset = old->header.start_offset;
      }
      KILN_ASSIGN_OR_RETURN(offset, read_records(*old, old_path, offset, &budget, &chunk));
      // The bytes left after the last newline were all read (they fit in what is left of the
      // budget) when `left <= budget`: then they are a record torn by a crash or a full disk.
      // The old file never grows, so waiting for the rest would stall the reader for good; they
      // are counted as lost instead.
      const int64_t left = old->end_offset() - offset;
      if (left > 0 && static_cast<uint64_t>(left) <= budget) {
        chunk.skipped_bytes += left;
        offset = old->end_offset();
      }
      if (offset < old->end_offset()) {
        chunk.next_offset = offset;  // the budget ran out
        return chunk;
      }
    }
    if (offset < cur_start) {
      chunk.skipped_bytes += cur_start - offset;
      offset = cur_start;
    }
  }
  KILN_ASSIGN_OR_RETURN(chunk.next_offset, read_records(*cur, path, offset, &budget, &chunk));
  return chunk;
}

}  // namespace kiln::sched

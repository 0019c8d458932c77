// Token shard writing, reading and listing (the format is in include/kiln/train/shard.h).
//
// Tokens are copied between memory and the file as raw bytes: the format is little-endian and so
// is every machine Kiln builds for (x86-64, and aarch64 as Linux runs it); the static_assert below
// stops a big-endian build instead of letting it write byte-swapped shards.
#include <kiln/train/shard.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <system_error>

#include <kiln/base/check.h>
#include <kiln/base/checksum.h>
#include <kiln/base/endian.h>

namespace kiln::train {
namespace {

static_assert(std::endian::native == std::endian::little,
              "token shards are read and written as raw little-endian bytes");

// Field offsets within the header (see shard.h).
constexpr size_t kMagicOffset = 0;
constexpr size_t kVersionOffset = 8;
constexpr size_t kHeaderBytesOffset = 12;
constexpr size_t kTokenCountOffset = 16;
constexpr size_t kChecksumOffset = 24;
static_assert(kChecksumOffset + 8 == kShardHeaderBytes);

constexpr size_t kTokenBytes = sizeof(uint16_t);

std::string errno_text(int err) {
  return std::strerror(err);
}

// The reader's header fields (4 or 8 bytes), over kiln/base/endian.h.
uint64_t get_le(const unsigned char* in, size_t bytes) {
  KILN_CHECK(bytes == 4 || bytes == 8) << "shard header fields are 4 or 8 bytes, not " << bytes;
  return bytes == 4 ? decode_u32_le(in) : decode_u64_le(in);
}

std::string hex_bytes(const unsigned char* bytes, size_t n) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    out += kHex[bytes[i] >> 4];
    out += kHex[bytes[i] & 0xf];
  }
  return out;
}

// Reads exactly `size` bytes at `offset`, retrying short reads and EINTR.
Status read_exact(int fd, void* data, size_t size, uint64_t offset, const std::string& path) {
  char* p = static_cast<char*>(data);
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::pread(fd, p + done, size - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      return Status::io_error(path + ": read failed at byte " + std::to_string(offset + done) +
                              ": " + errno_text(errno));
    }
    if (n == 0) {
      return Status::corruption(path + ": file shrank while being read (at byte " +
                                std::to_string(offset + done) + ")");
    }
    done += static_cast<size_t>(n);
  }
  return Status();
}

bool is_shard_name(const std::filesystem::path& p) {
  return p.extension() == ".bin";
}

std::string shard_name(uint64_t index) {
  char name[32];  // "shard_" + up to 20 digits + ".bin" + NUL
  std::snprintf(name, sizeof(name), "shard_%06llu.bin", static_cast<unsigned long long>(index));
  return name;
}

// Closes a file descriptor when it goes out of scope.
class FdCloser {
 public:
  explicit FdCloser(int fd) : fd_(fd) {}
  ~FdCloser() { ::close(fd_); }
  FdCloser(const FdCloser&) = delete;
  FdCloser& operator=(const FdCloser&) = delete;

 private:
  int fd_;
};

}  // namespace

Status write_shard(const std::string& path, std::span<const uint16_t> tokens, FileSystem* fs) {
  unsigned char header[kShardHeaderBytes] = {};
  std::memcpy(header + kMagicOffset, kShardMagic, sizeof(kShardMagic));
  encode_u32_le(kShardVersion, header + kVersionOffset);
  encode_u32_le(kShardHeaderBytes, header + kHeaderBytesOffset);
  encode_u64_le(tokens.size(), header + kTokenCountOffset);
  encode_u64_le(xxh3(tokens.data(), tokens.size_bytes()), header + kChecksumOffset);
  const ByteSpan spans[] = {{header, sizeof(header)}, {tokens.data(), tokens.size_bytes()}};
  return write_file_durably(fs, path, spans).status();
}

Status read_shard(const std::string& path, std::vector<uint16_t>* tokens) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    const std::string msg = path + ": cannot open: " + errno_text(err);
    return err == ENOENT ? Status::not_found(msg) : Status::io_error(msg);
  }
  FdCloser closer(fd);
  struct stat st {};
  if (::fstat(fd, &st) != 0) return Status::io_error(path + ": cannot stat: " + errno_text(errno));
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size < kShardHeaderBytes) {
    return Status::corruption(path + ": truncated: " + std::to_string(size) +
                              " bytes, shorter than the " + std::to_string(kShardHeaderBytes) +
                              "-byte header");
  }
  unsigned char header[kShardHeaderBytes];
  KILN_RETURN_IF_ERROR(read_exact(fd, header, sizeof(header), 0, path));
  if (std::memcmp(header + kMagicOffset, kShardMagic, sizeof(kShardMagic)) != 0) {
    return Status::corruption(path + ": bad magic " + hex_bytes(header, sizeof(kShardMagic)) +
                              ": not a Kiln token shard (which starts with \"KILNTOK1\")");
  }
  const uint64_t version = get_le(header + kVersionOffset, 4);
  if (version != kShardVersion) {
    return Status::corruption(path + ": unsupported shard version " + std::to_string(version) +
                              " (this build reads version " + std::to_string(kShardVersion) + ")");
  }
  const uint64_t header_bytes = get_le(header + kHeaderBytesOffset, 4);
  if (header_bytes != kShardHeaderBytes) {
    return Status::corruption(path + ": header size " + std::to_string(header_bytes) +
                              ", but version 1 headers are " + std::to_string(kShardHeaderBytes) +
                              " bytes");
  }
  const uint64_t count = get_le(header + kTokenCountOffset, 8);
  const uint64_t checksum = get_le(header + kChecksumOffset, 8);
  const uint64_t follow_bytes = size - kShardHeaderBytes;
  // A count this large cannot be a real file; say so before 2 * count overflows.
  const bool count_too_large = count > (std::numeric_limits<uint64_t>::max() / kTokenBytes);
  if (count_too_large || count * kTokenBytes != follow_bytes) {
    const std::string expected =
        count_too_large ? std::string("more than 2^64") : std::to_string(count * kTokenBytes);
    const char* what = count_too_large || count * kTokenBytes > follow_bytes
                           ? ": truncated: header says "
                           : ": trailing bytes: header says ";
    return Status::corruption(path + what + std::to_string(count) + " tokens (" + expected +
                              " bytes) but " + std::to_string(follow_bytes) + " bytes follow");
  }

  const size_t old_size = tokens->size();
  tokens->resize(old_size + count);
  uint16_t* dest = tokens->data() + old_size;
  Status status = read_exact(fd, dest, count * kTokenBytes, kShardHeaderBytes, path);
  if (status.ok()) {
    const uint64_t actual = xxh3(dest, count * kTokenBytes);
    if (actual != checksum) {
      status = Status::corruption(path + ": checksum mismatch: header says " +
                                  checksum_hex(checksum) + ", the " + std::to_string(count) +
                                  " tokens hash to " + checksum_hex(actual));
    }
  }
  if (!status.ok()) tokens->resize(old_size);
  return status;
}

Result<std::vector<std::string>> list_shards(const std::string& dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    return Status::not_found(dir + ": no such directory" + (ec ? ": " + ec.message() : ""));
  }
  std::vector<std::string> paths;
  std::filesystem::directory_iterator it(dir, ec);
  const std::filesystem::directory_iterator end;
  for (; !ec && it != end; it.increment(ec)) {
    if (is_shard_name(it->path()) && it->is_regular_file(ec)) paths.push_back(it->path().string());
  }
  if (ec) return Status::io_error(dir + ": cannot list: " + ec.message());
  if (paths.empty()) {
    return Status::not_found(dir + ": no token shards (*.bin) in it; `kiln tokenize` writes them");
  }
  std::sort(paths.begin(), paths.end());
  return paths;
}

Result<ShardWriter> ShardWriter::create(const std::string& dir, uint64_t shard_tokens,
                                        FileSystem* fs) {
  if (shard_tokens == 0) {
    return Status::invalid_argument(dir + ": shard size must be at least one token");
  }
  KILN_RETURN_IF_ERROR(make_dirs_durably(fs, dir));
  std::error_code ec;
  std::filesystem::directory_iterator it(dir, ec);
  const std::filesystem::directory_iterator end;
  size_t existing = 0;
  for (; !ec && it != end; it.increment(ec)) {
    if (is_shard_name(it->path())) ++existing;
  }
  if (ec) return Status::io_error(dir + ": cannot list: " + ec.message());
  if (existing > 0) {
    return Status::invalid_argument(
        dir + ": already holds " + std::to_string(existing) +
        " shard file(s) (*.bin), which would be read together with the new ones; remove them or "
        "choose another directory");
  }
  return ShardWriter(dir, shard_tokens, fs);
}

Status ShardWriter::append(std::span<const uint32_t> tokens) {
  KILN_CHECK(!finished_) << "ShardWriter::append after finish()";
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] > kShardTokenMax) {
      return Status::invalid_argument(
          dir_ + ": token " + std::to_string(tokens[i]) + " at stream position " +
          std::to_string(tokens_written_ + pending_.size() + i) +
          " does not fit in a shard (ids are stored as uint16, at most " +
          std::to_string(kShardTokenMax) + ")");
    }
  }
  size_t i = 0;
  while (i < tokens.size()) {
    const size_t room = static_cast<size_t>(shard_tokens_ - pending_.size());
    const size_t n = std::min(room, tokens.size() - i);
    for (size_t k = 0; k < n; ++k)
      pending_.push_back(static_cast<uint16_t>(tokens[i + k]));
    i += n;
    if (pending_.size() == shard_tokens_) KILN_RETURN_IF_ERROR(flush_shard());
  }
  return Status();
}

Status ShardWriter::finish() {
  KILN_CHECK(!finished_) << "ShardWriter::finish called twice";
  finished_ = true;
  if (pending_.empty()) return Status();
  return flush_shard();
}

Status ShardWriter::flush_shard() {
  const std::string path = (std::filesystem::path(dir_) / shard_name(shards_written_)).string();
  KILN_RETURN_IF_ERROR(write_shard(path, pending_, fs_));
  tokens_written_ += pending_.size();
  ++shards_written_;
  paths_.push_back(path);
  pending_.clear();
  return Status();
}

}  // namespace kiln::train

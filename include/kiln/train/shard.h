// Token shards: the files `kiln tokenize` writes and the data loader reads.
//
// A shard is one file, little-endian throughout:
//
//   offset  size  field
//   0       8     magic         "KILNTOK1" (ASCII, no terminator)
//   8       4     version       uint32, kShardVersion (1)
//   12      4     header_bytes  uint32, kShardHeaderBytes (32): where the tokens start
//   16      8     token_count   uint64, the number of tokens that follow
//   24      8     checksum      uint64, XXH3-64 (seed 0) of the token bytes [32, 32 + 2*count)
//   32      2*n   tokens        uint16 each (GPT-2's 50257 ids fit; 65536 and up cannot be stored)
//
// Invariants a valid shard holds, all checked by read_shard(): the magic, version and header size
// are exactly these; the file is exactly header_bytes + 2 * token_count bytes long (no truncation,
// no trailing bytes); the checksum matches. Every error names the file and what is wrong.
//
// Writers never leave a partial file under a shard's name: they write `<name>.tmp`, fsync it,
// rename it into place and fsync the directory, so a crash leaves either the old state or the
// whole shard (plus at worst a stray .tmp file, which no reader looks at).
//
// A data directory is every `*.bin` file in it, sorted by name (list_shards()).
#ifndef KILN_TRAIN_SHARD_H_
#define KILN_TRAIN_SHARD_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <kiln/base/file_system.h>
#include <kiln/base/result.h>
#include <kiln/base/status.h>

namespace kiln::train {

inline constexpr char kShardMagic[8] = {'K', 'I', 'L', 'N', 'T', 'O', 'K', '1'};
inline constexpr uint32_t kShardVersion = 1;
inline constexpr size_t kShardHeaderBytes = 32;
// The largest id a shard can hold: tokens are stored as uint16.
inline constexpr uint32_t kShardTokenMax = 65535;
// `kiln tokenize`'s default shard size: 100M tokens are 200 MB, read whole in well under a
// second, and a corpus of a few billion tokens stays at a few dozen files.
inline constexpr uint64_t kDefaultShardTokens = 100'000'000;

// Writes `tokens` as a shard at `path` through `fs` (atomically, by write_file_durably in
// kiln/base/file_system.h). Errors name the file and the call that failed.
Status write_shard(const std::string& path, std::span<const uint16_t> tokens,
                   FileSystem* fs = posix_file_system());

// Reads and verifies the shard at `path` and appends its tokens to `*tokens`. On error `*tokens`
// is left as it was. Corruption for a bad magic, version, header size, length or checksum;
// IoError or NotFound when the file cannot be read.
Status read_shard(const std::string& path, std::vector<uint16_t>* tokens);

// The `*.bin` files directly in `dir`, sorted by name, as paths "dir/name". NotFound when `dir`
// does not exist or holds no `*.bin` file; IoError when it cannot be listed.
Result<std::vector<std::string>> list_shards(const std::string& dir);

// Splits one token stream into `dir/shard_000000.bin`, `dir/shard_000001.bin`, ... of
// `shard_tokens` tokens each (the last may be shorter). Holds at most one shard's tokens in
// memory (2 bytes each). Not thread-safe.
class ShardWriter {
 public:
  // Creates `dir` (and its parents) if needed. InvalidArgument when shard_tokens is 0 or when
  // `dir` already holds `*.bin` files: a loader would read them together with the new ones.
  // Shards are written through `fs` (not owned; REQUIRES: outlives the writer).
  static Result<ShardWriter> create(const std::string& dir,
                                    uint64_t shard_tokens = kDefaultShardTokens,
                                    FileSystem* fs = posix_file_system());

  // Appends tokens to the stream, writing every shard that fills. InvalidArgument, naming the
  // id and its position in the stream, for a token above kShardTokenMax; nothing of `tokens` is
  // appended then.
  Status append(std::span<const uint32_t> tokens);

  // Writes the last, partial shard (if any tokens are pending). An empty stream writes no shard.
  // REQUIRES: not called twice.
  Status finish();

  uint64_t tokens_written() const { return tokens_written_; }
  uint64_t shards_written() const { return shards_written_; }
  // The paths written so far, in stream order.
  const std::vector<std::string>& paths() const { return paths_; }

 private:
  ShardWriter(std::string dir, uint64_t shard_tokens, FileSystem* fs)
      : dir_(std::move(dir)), shard_tokens_(shard_tokens), fs_(fs) {}
  Status flush_shard();

  std::string dir_;
  uint64_t shard_tokens_ = 0;
  FileSystem* fs_ = nullptr;       // not owned
  std::vector<uint16_t> pending_;  // < shard_tokens_ tokens of the shard being filled
  uint64_t tokens_written_ = 0;    // in finished shards
  uint64_t shards_written_ = 0;
  std::vector<std::string> paths_;
  bool finished_ = false;
};

}  // namespace kiln::train

#endif  // KILN_TRAIN_SHARD_H_

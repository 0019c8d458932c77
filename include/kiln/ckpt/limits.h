// Every limit of kiln_ckpt in one place, each with the reason for its value (TigerStyle).
//
// The on-disk names depend on the first two: a step directory is "step_" + 9 digits and a shard
// is "rank_" + 5 digits + "_of_" + 5 digits, so names sort the way their numbers do.
#ifndef KILN_CKPT_LIMITS_H_
#define KILN_CKPT_LIMITS_H_

#include <cstddef>
#include <cstdint>

namespace kiln::ckpt {

// Shard names carry rank and world size in 5 digits; 99999 ranks is far beyond any job one
// coordinator schedules, and the bound keeps a manifest under kManifestBytesMax.
inline constexpr int kWorldSizeMax = 99999;

// Step directories carry the step in 9 digits. At one step per 10 ms a run needs 115 days to
// reach it.
inline constexpr int64_t kStepMax = 999'999'999;

// A manifest holds about 150 bytes per rank plus the trainer's metadata (config hash, loader
// positions, RNG states: a few KiB). 64 MiB covers kWorldSizeMax ranks with room to spare and
// bounds what reading a corrupt or hostile manifest may allocate.
inline constexpr size_t kManifestBytesMax = size_t{64} << 20;

// The safetensors readers (huggingface's and ours) refuse headers above 100 MB; a shard whose
// header would exceed it is refused when written rather than when read.
inline constexpr size_t kShardHeaderBytesMax = size_t{100} << 20;

// set_aside_checkpoint() tries "<dir>.corrupt", ".corrupt.2", ... up to this many names; more
// set-aside copies of one step than this means a broken disk, not bad luck.
inline constexpr int kSetAsideNamesMax = 100;

// Each kept checkpoint is a full copy of the training state; keeping more than this is a
// configuration mistake, not a policy.
inline constexpr int kKeepLastMax = 1000;

// Shards are written in chunks of this size: large enough that the syscall and hashing overhead
// per chunk is noise (a 4 MiB write copies for ~0.5 ms; the call costs ~1 us), small enough that
// the chunk just hashed is still in the last-level cache when write() copies it, and the
// size `dd bs=4M` uses in bench/ckpt/run.
inline constexpr size_t kWriteChunkBytesDefault = size_t{4} << 20;
// Smaller chunks turn a shard write into a syscall storm; this floor keeps a misconfiguration
// from costing more than a few percent.
inline constexpr size_t kWriteChunkBytesMin = size_t{64} << 10;

// How long AsyncCheckpointer::save() waits for the previous write under OverlapPolicy::kWait
// unless told otherwise: a 100 GiB shard at 200 MB/s takes about 9 minutes.
inline constexpr int64_t kSaveWaitTimeoutMsDefault = 10 * 60 * 1000;

// Completed saves kept for take_completed(). With at most one write in flight and a trainer that
// polls every step, one or two accumulate; older ones are dropped (and counted) past this bound.
inline constexpr size_t kCompletedSavesMax = 16;

}  // namespace kiln::ckpt

#endif  // KILN_CKPT_LIMITS_H_

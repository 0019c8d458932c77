// The checkpoints in a directory: listing, verification, choosing what to resume from, retention.
//
// A step directory is in one of three states (checkpoint.h has the protocol that makes them):
//   complete    manifest.json is present and valid (its own checksum, fields, step)
//   incomplete  no manifest.json: a write that did not finish, or one still running
//   invalid     manifest.json is present but corrupt
// Only complete checkpoints exist as far as resuming is concerned. Listing reads manifests only;
// verification reads every byte of every file and compares XXH3s, which resuming also does.
//
// Thread safety: stateless; the functions may run while another process writes new checkpoints
// into the same directory (they only read, except apply_retention, which never touches a
// checkpoint newer than the newest complete one).
#ifndef KILN_CKPT_CATALOG_H_
#define KILN_CKPT_CATALOG_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <kiln/base/result.h>
#include <kiln/base/status.h>
#include <kiln/ckpt/checkpoint.h>

namespace kiln::ckpt {

enum class CheckpointState { kComplete, kIncomplete, kInvalid };

// "complete", "incomplete", "invalid".
std::string_view checkpoint_state_name(CheckpointState state);

struct CheckpointInfo {
  int64_t step = 0;
  std::string path;  // DIR/step_XXXXXXXXX
  CheckpointState state = CheckpointState::kIncomplete;
  std::string problem;  // why it is not complete; empty when it is
  Manifest manifest;    // meaningful only when complete
};

// Every step directory in `dir`, oldest first; other entries are ignored. kNotFound when `dir`
// does not exist, kIoError when it cannot be read.
Result<std::vector<CheckpointInfo>> list_checkpoints(const std::string& dir);

struct FileVerdict {
  FileRecord record;  // as the manifest has it
  Status status;      // OK, or why the file does not match
};

// Reads the manifest of `step_dir` and every file it names, comparing sizes and XXH3s. OK iff all
// match; otherwise the error names every file that does not (kCorruption, or kNotFound when the
// manifest itself is missing). `files`, when not null, receives one verdict per file.
Status verify_checkpoint(const std::string& step_dir, std::vector<FileVerdict>* files = nullptr);

struct SkippedCheckpoint {
  int64_t step = 0;
  std::string path;
  Status reason;  // why it cannot be resumed from
};

struct ResumeChoice {
  std::optional<CheckpointInfo> chosen;    // none: nothing to resume from, start fresh
  std::vector<SkippedCheckpoint> skipped;  // newer than `chosen`, newest first
};

// The newest checkpoint in `dir` that verifies (every file's XXH3), and every newer one that was
// passed over with the reason, so the caller can say "step 140 is corrupt (rank_00001...: xxh3
// mismatch), resuming from step 120". A missing `dir` means a fresh start, not an error. Every
// file of a candidate is read, so each rank picks the same checkpoint on a shared filesystem.
Result<ResumeChoice> find_resume_checkpoint(const std::string& dir);

// Moves a step directory that must not be resumed from (its manifest is invalid or a file fails
// verification) out of the way, to "<step_dir>.corrupt" (or ".corrupt.2", ...), where listing and
// retention ignore it and a person can still inspect it. A trainer that resumes from an older
// checkpoint does this to every newer one with a manifest, since a step directory holding a
// manifest is never written into again. Returns the new path.
Result<std::string> set_aside_checkpoint(const std::string& step_dir);

// Keeps the newest `keep_last` complete checkpoints and removes older complete ones, plus
// incomplete or invalid directories older than the oldest one kept; nothing newer than the newest
// complete checkpoint is touched (a write may be running there). A removal deletes the manifest
// first, so a crash half-way leaves an incomplete directory, never a complete-looking partial one.
// Returns the steps removed, oldest first. REQUIRES: 1 <= keep_last <= kKeepLastMax.
Result<std::vector<int64_t>> apply_retention(const std::string& dir, int keep_last);

}  // namespace kiln::ckpt

#endif  // KILN_CKPT_CATALOG_H_

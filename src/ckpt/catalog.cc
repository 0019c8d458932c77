// Listing, verification, resume selection and retention over a checkpoint directory. See
// include/kiln/ckpt/catalog.h.
#include <kiln/ckpt/catalog.h>

#include <dirent.h>
#include <sys/stat.h>

#include <kiln/base/check.h>

#include <algorithm>
#include <cerrno>

#include "ckpt/file_io.h"

namespace kiln::ckpt {
namespace {

// The step directories in `dir` (name parses, entry is a directory), unsorted.
Result<std::vector<int64_t>> step_dirs(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return internal::os_error(dir, "opendir", errno);
  std::vector<int64_t> steps;
  while (const dirent* entry = ::readdir(d)) {
    const int64_t step = parse_step_dir_name(entry->d_name);
    if (step < 0) continue;
    struct stat st {};
    const std::string path = dir + "/" + entry->d_name;
    if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) steps.push_back(step);
  }
  ::closedir(d);
  return steps;
}

CheckpointInfo inspect(const std::string& dir, int64_t step) {
  CheckpointInfo info;
  info.step = step;
  info.path = step_dir_path(dir, step);
  Result<Manifest> manifest = read_manifest(info.path);
  if (manifest.ok()) {
    info.state = CheckpointState::kComplete;
    info.manifest = std::move(*manifest);
  } else if (manifest.status().is_not_found()) {
    info.state = CheckpointState::kIncomplete;
    info.problem = "no manifest.json: the write did not finish (or is still running)";
  } else {
    info.state = CheckpointState::kInvalid;
    info.problem = manifest.status().message();
  }
  return info;
}

}  // namespace

std::string_view checkpoint_state_name(CheckpointState state) {
  switch (state) {
    case CheckpointState::kComplete: return "complete";
    case CheckpointState::kIncomplete: return "incomplete";
    case CheckpointState::kInvalid: return "invalid";
  }
  return "?";
}

Result<std::vector<CheckpointInfo>> list_checkpoints(const std::string& dir) {
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> steps, step_dirs(dir));
  std::sort(steps.begin(), steps.end());
  std::vector<CheckpointInfo> out;
  out.reserve(steps.size());
  for (int64_t step : steps)
    out.push_back(inspect(dir, step));
  return out;
}

Status verify_checkpoint(const std::string& step_dir, std::vector<FileVerdict>* files) {
  KILN_ASSIGN_OR_RETURN(const Manifest manifest, read_manifest(step_dir));
  std::string failures;
  int failed = 0;
  for (const FileRecord& record : manifest.files) {
    Status status = verify_file(step_dir, record);
    if (!status.ok()) {
      failures += (failed == 0 ? "" : "; ") + status.message();
      ++failed;
    }
    if (files != nullptr) files->push_back({record, std::move(status)});
  }
  if (failed == 0) return Status();
  return Status::corruption(step_dir + ": " + std::to_string(failed) + " of " +
                            std::to_string(manifest.files.size()) +
                            " files do not match the manifest: " + failures);
}

Result<ResumeChoice> find_resume_checkpoint(const std::string& dir) {
  Result<std::vector<CheckpointInfo>> listed = list_checkpoints(dir);
  if (!listed.ok() && listed.status().is_not_found()) return ResumeChoice{};
  if (!listed.ok()) return listed.status();
  ResumeChoice choice;
  for (auto it = listed->rbegin(); it != listed->rend(); ++it) {
    if (it->state != CheckpointState::kComplete) {
      choice.skipped.push_back({it->step, it->path,
                                it->state == CheckpointState::kIncomplete
                                    ? Status::not_found(it->problem)
                                    : Status::corruption(it->problem)});
      continue;
    }
    Status verified = verify_checkpoint(it->path);
    if (verified.ok()) {
      choice.chosen = std::move(*it);
      break;
    }
    choice.skipped.push_back({it->step, it->path, std::move(verified)});
  }
  return choice;
}

Result<std::string> set_aside_checkpoint(const std::string& step_dir) {
  std::string dir = step_dir;
  while (dir.size() > 1 && dir.back() == '/')
    dir.pop_back();
  for (int n = 1; n <= kSetAsideNamesMax; ++n) {
    const std::string target = dir + ".corrupt" + (n == 1 ? "" : "." + std::to_string(n));
    struct stat st {};
    if (::lstat(target.c_str(), &st) == 0) continue;
    if (::rename(dir.c_str(), target.c_str()) != 0) {
      return internal::os_error(dir, ("rename to " + target).c_str(), errno);
    }
    const size_t slash = dir.find_last_of('/');
    KILN_RETURN_IF_ERROR(
        internal::fsync_dir(slash == std::string::npos ? "." : dir.substr(0, slash + 1)));
    return target;
  }
  return Status::io_error(dir + ": " + std::to_string(kSetAsideNamesMax) +
                          " set-aside copies already exist");
}

Result<std::vector<int64_t>> apply_retention(const std::string& dir, int keep_last) {
  KILN_CHECK(keep_last >= 1 && keep_last <= kKeepLastMax) << "keep_last " << keep_last;
  KILN_ASSIGN_OR_RETURN(const std::vector<CheckpointInfo> listed, list_checkpoints(dir));
  std::vector<int64_t> complete;
  for (const CheckpointInfo& info : listed) {
    if (info.state == CheckpointState::kComplete) complete.push_back(info.step);
  }
  if (complete.empty()) return std::vector<int64_t>{};
  // `complete` is oldest first; the kept ones are its last keep_last entries.
  const size_t kept_from = complete.size() > static_cast<size_t>(keep_last)
                               ? complete.size() - static_cast<size_t>(keep_last)
                               : 0;
  const int64_t oldest_kept = complete[kept_from];
  std::vector<int64_t> removed;
  for (const CheckpointInfo& info : listed) {
    if (info.step >= oldest_kept) break;
    KILN_RETURN_IF_ERROR(internal::remove_step_dir(info.path, std::string(kManifestFileName))
                             .with_context("retention (keep " + std::to_string(keep_last) + ")"));
    removed.push_back(info.step);
  }
  if (!removed.empty()) KILN_RETURN_IF_ERROR(internal::fsync_dir(dir));
  return removed;
}

}  // namespace kiln::ckpt

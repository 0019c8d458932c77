// Test support: a FileSystem that passes every call to another one (the POSIX one by default)
// except those a test told it to fail, the way a full or failing disk would:
//
//   FaultFileSystem fs;
//   fs.fail_write_at("rank_00000", 100, ENOSPC);   // bytes 0..99 land, then "No space left"
//   fs.fail_sync("manifest.json");                 // fsync of a matching file: EIO
//   fs.fail_rename("manifest.json");               // rename from a matching path: EIO
//   fs.fail_sync_dir("step_000000002");            // fsync of a matching directory: EIO
//
// A rule matches every path that contains its pattern (so "x.bin" matches "d/x.bin.tmp") and
// stays until clear(). Errors read as the POSIX ones do ("<path>: write: No space left on
// device"). Thread-safe: checkpoint writers call it from their own threads. Tests only.
#ifndef KILN_BASE_TESTING_FAULT_FILE_SYSTEM_H_
#define KILN_BASE_TESTING_FAULT_FILE_SYSTEM_H_

#include <kiln/base/file_system.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace kiln::testing {

class FaultFileSystem final : public FileSystem {
 public:
  // REQUIRES: `target` outlives this.
  explicit FaultFileSystem(FileSystem* target = posix_file_system()) : target_(target) {}

  // Files opened for writing whose path contains `pattern` take bytes [0, offset) and then fail
  // the write that would reach byte `offset` with `err` (ENOSPC, EIO, ...). Their preallocation
  // is skipped, as on a file system without fallocate, so the write is what fails.
  void fail_write_at(std::string pattern, uint64_t offset, int err) {
    add({Kind::kWrite, std::move(pattern), offset, err});
  }
  // fsync of a file whose path contains `pattern` fails with `err`.
  void fail_sync(std::string pattern, int err = EIO) {
    add({Kind::kSync, std::move(pattern), 0, err});
  }
  // rename from a path that contains `pattern` fails with `err`; nothing is renamed.
  void fail_rename(std::string pattern, int err = EIO) {
    add({Kind::kRename, std::move(pattern), 0, err});
  }
  // fsync of a directory whose path contains `pattern` fails with `err`.
  void fail_sync_dir(std::string pattern, int err = EIO) {
    add({Kind::kSyncDir, std::move(pattern), 0, err});
  }
  // Removes every rule.
  void clear() {
    std::lock_guard<std::mutex> lock(mu_);
    rules_.clear();
  }
  // How many calls failed because of a rule.
  int faults_fired() const {
    std::lock_guard<std::mutex> lock(mu_);
    return fired_;
  }

  Result<std::unique_ptr<WritableFile>> open_for_write(const std::string& path) override {
    Result<std::unique_ptr<WritableFile>> file = target_->open_for_write(path);
    if (!file.ok()) return file;
    return std::unique_ptr<WritableFile>(new File(this, std::move(*file)));
  }
  Result<std::unique_ptr<ReadableFile>> open_for_read(const std::string& path) override {
    return target_->open_for_read(path);
  }
  Status rename(const std::string& from, const std::string& to) override {
    if (const int err = fault(Kind::kRename, from); err != 0) {
      return os_error(from, "rename to " + to, err);
    }
    return target_->rename(from, to);
  }
  Status sync_dir(const std::string& dir) override {
    if (const int err = fault(Kind::kSyncDir, dir); err != 0) {
      return os_error(dir, "fsync directory", err);
    }
    return target_->sync_dir(dir);
  }
  Result<bool> make_dir(const std::string& dir) override { return target_->make_dir(dir); }
  Status unlink(const std::string& path) override { return target_->unlink(path); }
  Result<FileInfo> stat(const std::string& path) override { return target_->stat(path); }

 private:
  enum class Kind { kWrite, kSync, kRename, kSyncDir };
  struct Rule {
    Kind kind;
    std::string pattern;
    uint64_t offset;
    int err;
  };

  // A file being written: counts its bytes and fails where a kWrite rule says.
  class File final : public WritableFile {
   public:
    File(FaultFileSystem* fs, std::unique_ptr<WritableFile> target)
        : fs_(fs), target_(std::move(target)) {
      fail_at_ = fs_->write_rule(target_->path(), &write_err_);
    }
    const std::string& path() const override { return target_->path(); }
    Status preallocate(uint64_t bytes) override {
      if (write_err_ != 0) return Status();
      return target_->preallocate(bytes);
    }
    Status append(const void* data, size_t size) override {
      if (write_err_ == 0 || written_ + size <= fail_at_) {
        written_ += size;
        return target_->append(data, size);
      }
      const size_t before = static_cast<size_t>(fail_at_ - std::min(fail_at_, written_));
      if (before > 0) KILN_RETURN_IF_ERROR(target_->append(data, before));
      written_ += before;
      fs_->count_fired();
      return os_error(path(), "write", write_err_);
    }
    void start_writeback(uint64_t offset, uint64_t bytes) override {
      target_->start_writeback(offset, bytes);
    }
    Status sync() override {
      if (const int err = fs_->fault(Kind::kSync, path()); err != 0) {
        return os_error(path(), "fsync", err);
      }
      return target_->sync();
    }
    Status close() override { return target_->close(); }

   private:
    FaultFileSystem* fs_;
    std::unique_ptr<WritableFile> target_;
    uint64_t fail_at_ = 0;
    int write_err_ = 0;  // 0: no write fault for this file
    uint64_t written_ = 0;
  };

  void add(Rule rule) {
    std::lock_guard<std::mutex> lock(mu_);
    rules_.push_back(std::move(rule));
  }
  // The errno a rule of `kind` gives `path` (counted as fired), or 0.
  int fault(Kind kind, const std::string& path) {
    std::lock_guard<std::mutex> lock(mu_);
    for (const Rule& r : rules_) {
      if (r.kind == kind && path.find(r.pattern) != std::string::npos) {
        ++fired_;
        return r.err;
      }
    }
    return 0;
  }
  // The offset a write rule fails `path` at, with its errno in *err (0 when none matches).
  uint64_t write_rule(const std::string& path, int* err) {
    std::lock_guard<std::mutex> lock(mu_);
    for (const Rule& r : rules_) {
      if (r.kind == Kind::kWrite && path.find(r.pattern) != std::string::npos) {
        *err = r.err;
        return r.offset;
      }
    }
    *err = 0;
    return 0;
  }
  void count_fired() {
    std::lock_guard<std::mutex> lock(mu_);
    ++fired_;
  }

  FileSystem* target_;
  mutable std::mutex mu_;
  std::vector<Rule> rules_;
  int fired_ = 0;
};

}  // namespace kiln::testing

#endif  // KILN_BASE_TESTING_FAULT_FILE_SYSTEM_H_

// Issue 10: faults injected through the FileSystem interface into safetensors exports
// (write_safetensors): ENOSPC or EIO at the first byte, mid-file and at the last byte, a failed
// fsync, a failed rename, a failed directory fsync. The error names the file; the previous
// export stays intact and readable, and no partial file is left under the export's name.
#include <kiln/ckpt/safetensors.h>

#include <kiln/base/file_system.h>

#include <cerrno>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "base/testing/fault_file_system.h"
#include "base/testing/temp_path.h"
#include "ckpt/testing/ckpt_testing.h"

namespace kiln::ckpt {
namespace {

using kiln::testing::FaultFileSystem;
using testing::State;

TEST(SafetensorsFaultTest, AFailedExportNamesTheFileAndKeepsThePreviousOne) {
  const std::string dir = kiln::testing::unique_temp_dir("export");
  const std::string path = dir + "/model.safetensors";
  const State old_state(1);
  const std::vector<TensorRef> old_refs = old_state.refs();
  ASSERT_TRUE(write_safetensors(path, old_refs, {{"v", "old"}}).ok());
  const std::string old_bytes = testing::read_file(path);
  const uint64_t n = old_bytes.size();  // the new export has the same size (same shapes)

  const State new_state(2);
  const std::vector<TensorRef> new_refs = new_state.refs();
  struct Case {
    const char* name;
    std::function<void(FaultFileSystem*)> arm;
    std::string message;
  };
  const Case cases[] = {
      {"ENOSPC at byte 0", [](FaultFileSystem* fs) { fs->fail_write_at("model", 0, ENOSPC); },
       path + ".tmp: write: No space left on device"},
      {"EIO mid-file", [n](FaultFileSystem* fs) { fs->fail_write_at("model", n / 2, EIO); },
       path + ".tmp: write: Input/output error"},
      {"ENOSPC at the last byte",
       [n](FaultFileSystem* fs) { fs->fail_write_at("model", n - 1, ENOSPC); },
       path + ".tmp: write: No space left on device"},
      {"fsync", [](FaultFileSystem* fs) { fs->fail_sync("model"); },
       path + ".tmp: fsync: Input/output error"},
      {"rename", [](FaultFileSystem* fs) { fs->fail_rename("model"); },
       path + ".tmp: rename to " + path + ": Input/output error"},
  };
  for (const Case& c : cases) {
    FaultFileSystem fs;
    c.arm(&fs);
    const Status s = write_safetensors(path, new_refs, {{"v", "new"}}, &fs);
    ASSERT_FALSE(s.ok()) << c.name;
    EXPECT_EQ(fs.faults_fired(), 1) << c.name;
    EXPECT_TRUE(s.is_io_error()) << c.name;
    EXPECT_EQ(s.message(), c.message) << c.name;
    EXPECT_EQ(testing::read_file(path), old_bytes) << c.name;
    EXPECT_FALSE(std::filesystem::exists(path + ".tmp")) << c.name;
    Result<SafetensorsFile> file = SafetensorsFile::open(path);
    ASSERT_TRUE(file.ok()) << c.name << ": " << file.status().to_string();
    EXPECT_EQ(file->metadata().at("v"), "old") << c.name;
  }
}

// The export's directory is fsynced after the rename (it used not to be). When that fails the
// error names the directory, and the file under the name is the whole new export, never a part.
TEST(SafetensorsFaultTest, TheDirectoryIsFsyncedAndItsFailureNamesIt) {
  const std::string dir = kiln::testing::unique_temp_dir("export");
  const std::string path = dir + "/model.safetensors";
  const State state(3);
  const std::vector<TensorRef> refs = state.refs();
  FaultFileSystem fs;
  fs.fail_sync_dir(dir);
  const Status s = write_safetensors(path, refs, {}, &fs);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(fs.faults_fired(), 1);
  EXPECT_EQ(s.message(), dir + ": fsync directory: Input/output error");
  Result<SafetensorsFile> file = SafetensorsFile::open(path);
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  EXPECT_EQ(file->tensors().size(), refs.size());
}

}  // namespace
}  // namespace kiln::ckpt

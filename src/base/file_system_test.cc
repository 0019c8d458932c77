#include <kiln/base/checksum.h>
#include <kiln/base/file_system.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "base/testing/fault_file_system.h"
#include "base/testing/temp_path.h"
#include "base/write_loop.h"

namespace kiln {
namespace {

using testing::FaultFileSystem;

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

bool exists(const std::string& path) {
  return posix_file_system()->stat(path).ok();
}

Result<DurableWriteResult> write_text(FileSystem* fs, const std::string& path,
                                      const std::string& text, size_t chunk_bytes = 7) {
  const ByteSpan span{text.data(), text.size()};
  DurableWriteOptions options;
  options.chunk_bytes = chunk_bytes;  // several chunks even for a short text
  return write_file_durably(fs, path, std::span(&span, 1), options);
}

TEST(WriteLoopTest, AWriteThatTakesNothingIsAFullDiskNotALoop) {
  int calls = 0;
  const char data[10] = {};
  const Status s = base_internal::write_fully(
      [&](const void*, size_t) -> ssize_t {
        ++calls;
        return calls == 1 ? 4 : 0;  // a short write, then nothing
      },
      "d/f.tmp", data, sizeof(data));
  EXPECT_TRUE(s.is_io_error()) << s.to_string();
  EXPECT_EQ(s.message(), "d/f.tmp: write: No space left on device");
  EXPECT_EQ(calls, 2);
}

TEST(WriteLoopTest, RetriesEintrAndShortWrites) {
  std::string got;
  int calls = 0;
  const std::string data = "hello world";
  const Status s = base_internal::write_fully(
      [&](const void* p, size_t n) -> ssize_t {
        if (++calls % 2 == 1) {
          errno = EINTR;
          return -1;
        }
        got.append(static_cast<const char*>(p), 1);  // one byte at a time
        (void)n;
        return 1;
      },
      "f", data.data(), data.size());
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(got, data);
}

TEST(WriteLoopTest, AnErrorNamesThePathAndTheCall) {
  const char data[1] = {};
  const Status s = base_internal::write_fully(
      [](const void*, size_t) -> ssize_t {
        errno = EIO;
        return -1;
      },
      "/x/y", data, 1);
  EXPECT_EQ(s.message(), "/x/y: write: Input/output error");
}

TEST(FileSystemTest, DurableWriteWritesHashesAndLeavesNoTemp) {
  const std::string dir = kiln::testing::unique_temp_dir("d");
  const std::string path = dir + "/f.bin";
  const std::string text = "the quick brown fox jumps over the lazy dog";
  Result<DurableWriteResult> r = write_text(posix_file_system(), path, text);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->size_bytes, text.size());
  EXPECT_EQ(r->xxh3, xxh3(text));
  EXPECT_EQ(read_all(path), text);
  EXPECT_FALSE(exists(path + ".tmp"));
}

// Every failure of steps 1-4 keeps the old file and removes the temporary one; the error names
// the file and the call.
TEST(FileSystemTest, EveryFailureBeforeTheRenameKeepsTheOldFile) {
  const std::string dir = kiln::testing::unique_temp_dir("d");
  const std::string path = dir + "/f.bin";
  const std::string old_text = "old contents";
  ASSERT_TRUE(write_text(posix_file_system(), path, old_text).ok());
  const std::string text(100, 'n');
  struct Case {
    const char* what;
    void (*arm)(FaultFileSystem*);
    const char* message;
  };
  const Case cases[] = {
      {"ENOSPC at byte 0", [](FaultFileSystem* fs) { fs->fail_write_at("f.bin", 0, ENOSPC); },
       "f.bin.tmp: write: No space left on device"},
      {"EIO mid-file", [](FaultFileSystem* fs) { fs->fail_write_at("f.bin", 50, EIO); },
       "f.bin.tmp: write: Input/output error"},
      {"ENOSPC at the last byte",
       [](FaultFileSystem* fs) { fs->fail_write_at("f.bin", 99, ENOSPC); },
       "f.bin.tmp: write: No space left on device"},
      {"fsync", [](FaultFileSystem* fs) { fs->fail_sync("f.bin"); },
       "f.bin.tmp: fsync: Input/output error"},
      {"rename", [](FaultFileSystem* fs) { fs->fail_rename("f.bin"); }, "f.bin.tmp: rename to "},
  };
  for (const Case& c : cases) {
    FaultFileSystem fs;
    c.arm(&fs);
    Result<DurableWriteResult> r = write_text(&fs, path, text);
    ASSERT_FALSE(r.ok()) << c.what;
    EXPECT_TRUE(r.status().is_io_error()) << c.what;
    EXPECT_NE(r.status().message().find(dir + "/" + c.message), std::string::npos)
        << c.what << ": " << r.status().to_string();
    EXPECT_EQ(fs.faults_fired(), 1) << c.what;
    EXPECT_EQ(read_all(path), old_text) << c.what;
    EXPECT_FALSE(exists(path + ".tmp")) << c.what;
  }
}

TEST(FileSystemTest, AFailedDirectoryFsyncLeavesTheWholeNewFileAndNamesTheDirectory) {
  const std::string dir = kiln::testing::unique_temp_dir("d");
  const std::string path = dir + "/f.bin";
  ASSERT_TRUE(write_text(posix_file_system(), path, "old").ok());
  FaultFileSystem fs;
  fs.fail_sync_dir(dir);
  Result<DurableWriteResult> r = write_text(&fs, path, "new and complete");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), dir + ": fsync directory: Input/output error");
  EXPECT_EQ(read_all(path), "new and complete");  // never a partial file
  EXPECT_FALSE(exists(path + ".tmp"));
}

TEST(FileSystemTest, AMissingDirectoryIsNotFoundNamingTheTemp) {
  const std::string path = kiln::testing::unique_temp_path("missing") + "/f.bin";
  Result<DurableWriteResult> r = write_text(posix_file_system(), path, "x");
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(r.status().is_not_found());
  EXPECT_EQ(r.status().message(), path + ".tmp: open: No such file or directory");
}

TEST(FileSystemTest, MakeDirsDurablyCreatesParentsAndRefusesAFile) {
  const std::string root = kiln::testing::unique_temp_dir("d");
  ASSERT_TRUE(make_dirs_durably(posix_file_system(), root + "/a/b/c").ok());
  Result<FileInfo> info = posix_file_system()->stat(root + "/a/b/c");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->type, FileType::kDirectory);
  EXPECT_TRUE(make_dirs_durably(posix_file_system(), root + "/a/b/c").ok());  // already there
  ASSERT_TRUE(write_text(posix_file_system(), root + "/file", "x").ok());
  const Status s = make_dirs_durably(posix_file_system(), root + "/file/sub");
  EXPECT_TRUE(s.is_io_error());
  // (the message names the path as std::filesystem normalised it: "/tmp//x" reads "/tmp/x")
  EXPECT_NE(s.message().find("MakeDirsDurablyCreatesParentsAndRefusesAFile"), std::string::npos);
  EXPECT_NE(s.message().find(".d/file: exists and is not a directory"), std::string::npos)
      << s.to_string();
}

TEST(FileSystemTest, ReadsBackWhatWasWritten) {
  const std::string path = kiln::testing::unique_temp_dir("d") + "/f";
  ASSERT_TRUE(write_text(posix_file_system(), path, "abcdef").ok());
  Result<std::unique_ptr<ReadableFile>> f = posix_file_system()->open_for_read(path);
  ASSERT_TRUE(f.ok());
  Result<uint64_t> size = (*f)->size();
  ASSERT_TRUE(size.ok());
  EXPECT_EQ(*size, 6u);
  char buf[16];
  Result<size_t> n = (*f)->read(buf, sizeof(buf));
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(std::string(buf, *n), "abcdef");
  n = (*f)->read(buf, sizeof(buf));
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 0u);
  EXPECT_TRUE(posix_file_system()->open_for_read(path + "x").status().is_not_found());
  EXPECT_TRUE(posix_file_system()->unlink(path).ok());
  EXPECT_TRUE(posix_file_system()->unlink(path).is_not_found());
}

}  // namespace
}  // namespace kiln

#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "base/testing/temp_path.h"
#include "preflight/proc_files.h"

namespace kiln::preflight {
namespace {

std::string write_temp(const std::string& name, const std::string& text) {
  const std::string path = kiln::testing::unique_temp_path(name);
  std::ofstream(path) << text;
  return path;
}

TEST(ProcFilesTest, ReadsOsReleaseStyleKeyValues) {
  const std::string path = write_temp("os-release",
                                      "# comment\nID=debian\n"
                                      "PRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\n"
                                      "VERSION_ID=\"12\"\nbroken line\n");
  auto kv = read_key_values(path);
  EXPECT_EQ(kv["ID"], "debian");
  EXPECT_EQ(kv["PRETTY_NAME"], "Debian GNU/Linux 12 (bookworm)");
  EXPECT_EQ(kv["VERSION_ID"], "12");
  EXPECT_EQ(kv.size(), 3u);
  std::remove(path.c_str());
}

TEST(ProcFilesTest, ReadsIntegersStrictly) {
  const std::string good = write_temp("int-good", "4096\n");
  const std::string bad = write_temp("int-bad", "4096 kB\n");
  EXPECT_EQ(read_int(good), 4096);
  EXPECT_EQ(read_int(bad), std::nullopt);
  EXPECT_EQ(read_int("/nonexistent/file"), std::nullopt);
  std::remove(good.c_str());
  std::remove(bad.c_str());
}

TEST(ProcFilesTest, SelectedChoiceIsTheBracketedWord) {
  const std::string path = write_temp("thp", "always [madvise] never\n");
  EXPECT_EQ(selected_choice(path), "madvise");
  std::remove(path.c_str());
}

TEST(ProcFilesTest, MeminfoAgreesWithSysconf) {
  const std::optional<int64_t> total = meminfo_bytes("MemTotal");
  ASSERT_TRUE(total.has_value());
  const int64_t sysconf_total =
      static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE);
  EXPECT_EQ(*total, sysconf_total);  // both are the kernel's totalram_pages
  EXPECT_EQ(meminfo_bytes("NoSuchField"), std::nullopt);
}

}  // namespace
}  // namespace kiln::preflight

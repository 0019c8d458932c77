// Test support: temporary paths that no other test can collide with, even when ctest runs the
// tests of one binary in parallel processes (every TEST is its own process there).
#ifndef KILN_BASE_TESTING_TEMP_PATH_H_
#define KILN_BASE_TESTING_TEMP_PATH_H_

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>

namespace kiln::testing {

// TempDir()/<suite>.<test>.<pid>.<name>
inline std::string unique_temp_path(const std::string& name) {
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string test =
      info == nullptr ? "none" : std::string(info->test_suite_name()) + "." + info->name();
  for (char& c : test) {
    if (c == '/') c = '_';
  }
  return ::testing::TempDir() + "/" + test + "." + std::to_string(getpid()) + "." + name;
}

// A fresh, empty directory at unique_temp_path(name).
inline std::string unique_temp_dir(const std::string& name) {
  const std::string dir = unique_temp_path(name);
  mkdir(dir.c_str(), 0700);
  return dir;
}

}  // namespace kiln::testing

#endif  // KILN_BASE_TESTING_TEMP_PATH_H_

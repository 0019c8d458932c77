#include <kiln/sched/secret_box.h>

#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "base/testing/temp_path.h"

namespace kiln::sched {
namespace {

SecretBox test_box(char fill = 'k') {
  return SecretBox::from_key_for_test(std::string(kSecretKeyBytes, fill));
}

TEST(SecretBoxTest, RoundTripWithAFreshNonceEachTime) {
  const SecretBox box = test_box();
  for (const std::string& plain : {std::string(), std::string("s3cret"), std::string(5000, 'x'),
                                   std::string("\0bin\xff", 5)}) {
    const std::string sealed = box.seal(plain);
    EXPECT_EQ(sealed.size(), kSecretNonceBytes + plain.size() + kSecretTagBytes);
    if (!plain.empty()) {
      EXPECT_EQ(sealed.find(plain), std::string::npos);
    }
    Result<std::string> opened = box.open(sealed);
    ASSERT_TRUE(opened.ok()) << opened.status().to_string();
    EXPECT_EQ(*opened, plain);
  }
  EXPECT_NE(box.seal("same"), box.seal("same"));  // a fresh nonce per seal
}

TEST(SecretBoxTest, AnyFlippedByteIsCorruption) {
  const SecretBox box = test_box();
  const std::string sealed = box.seal("s3cret value");
  for (size_t i = 0; i < sealed.size(); ++i) {
    std::string bad = sealed;
    bad[i] = static_cast<char>(bad[i] ^ 0x01);
    Result<std::string> opened = box.open(bad);
    ASSERT_FALSE(opened.ok()) << "byte " << i;
    EXPECT_TRUE(opened.status().is_corruption()) << opened.status().to_string();
  }
  EXPECT_TRUE(box.open(sealed.substr(0, 27)).status().is_corruption());
  EXPECT_TRUE(box.open("").status().is_corruption());
  EXPECT_TRUE(test_box('o').open(sealed).status().is_corruption());  // another key
}

TEST(SecretBoxTest, KeyFileIsCreated0600AndReadBack) {
  const std::string dir = kiln::testing::unique_temp_dir("keys");
  const std::string path = dir + "/secret.key";
  Result<SecretBox> box = SecretBox::open_key_file(path);
  ASSERT_TRUE(box.ok()) << box.status().to_string();
  struct stat st {};
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  EXPECT_EQ(st.st_size, static_cast<off_t>(kSecretKeyBytes));
  // Reopening reads the same key: what one seals, the other opens.
  Result<SecretBox> again = SecretBox::open_key_file(path);
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  Result<std::string> opened = again->open(box->seal("hello"));
  ASSERT_TRUE(opened.ok());
  EXPECT_EQ(*opened, "hello");
  std::remove(path.c_str());
  rmdir(dir.c_str());  // empty: no temporary file was left behind
  EXPECT_NE(access(dir.c_str(), F_OK), 0);
}

TEST(SecretBoxTest, KeyFileWiderThan0600OrWrongSizeIsRefused) {
  const std::string dir = kiln::testing::unique_temp_dir("keys");
  const std::string path = dir + "/secret.key";
  std::ofstream(path) << std::string(kSecretKeyBytes, 'k');
  ASSERT_EQ(chmod(path.c_str(), 0644), 0);
  Result<SecretBox> box = SecretBox::open_key_file(path);
  ASSERT_FALSE(box.ok());
  EXPECT_TRUE(box.status().is_invalid_argument());
  EXPECT_NE(box.status().message().find(path), std::string::npos) << box.status().message();
  EXPECT_NE(box.status().message().find("mode 0644"), std::string::npos) << box.status().message();

  ASSERT_EQ(chmod(path.c_str(), 0400), 0);  // narrower than 0600 is fine
  EXPECT_TRUE(SecretBox::open_key_file(path).ok());

  ASSERT_EQ(chmod(path.c_str(), 0600), 0);
  std::ofstream(path) << "short";
  box = SecretBox::open_key_file(path);
  ASSERT_FALSE(box.ok());
  EXPECT_NE(box.status().message().find(path + ": 5 bytes; a key is exactly 32"), std::string::npos)
      << box.status().message();
  std::remove(path.c_str());
  EXPECT_FALSE(SecretBox::open_key_file(dir + "/missing-dir/secret.key").ok());
  rmdir(dir.c_str());
}

}  // namespace
}  // namespace kiln::sched

// AES-256-GCM through OpenSSL's EVP interface, and the key file. See
// include/kiln/sched/secret_box.h for the sealed format.
//
// Key file protocol (open_key_file), keeping the invariant "a file at PATH is a whole key":
//   1. open PATH: found -> check regular file, mode <= 0600, 32 bytes; read it; done
//   2. absent -> create PATH.tmp.<pid> (O_EXCL, 0600), write 32 RAND_bytes, fsync, close
//   3. link(PATH.tmp.<pid>, PATH): EEXIST means another process won the race -> read theirs (1)
//   4. unlink the temporary name, fsync the directory so PATH survives a crash
#include <kiln/sched/secret_box.h>

#include <kiln/base/unique_fd.h>

#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <memory>

#include <kiln/base/check.h>
#include <kiln/base/file_system.h>

namespace kiln::sched {
namespace {

// EVP takes lengths as int; secrets are bytes to kilobytes, so 1 GiB is a bound no caller meets.
constexpr size_t kPlaintextBytesMax = size_t{1} << 30;

struct CipherCtxFree {
  void operator()(EVP_CIPHER_CTX* ctx) const { EVP_CIPHER_CTX_free(ctx); }
};
using CipherCtx = std::unique_ptr<EVP_CIPHER_CTX, CipherCtxFree>;

const unsigned char* bytes(std::string_view s) {
  return reinterpret_cast<const unsigned char*>(s.data());
}

std::string mode_octal(mode_t mode) {
  char buf[8];
  std::snprintf(buf, sizeof(buf), "%04o", static_cast<unsigned>(mode & 07777));
  return buf;
}

// Step 1: reads an existing key file. kNotFound when there is none.
Result<std::string> read_key_file(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
  if (fd.get() < 0) return os_error(path, "open", errno);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return os_error(path, "fstat", errno);
  if (!S_ISREG(st.st_mode)) {
    return Status::invalid_argument("secret key file " + path + ": not a regular file");
  }
  if ((st.st_mode & 077) != 0) {
    return Status::invalid_argument("secret key file " + path + ": mode " + mode_octal(st.st_mode) +
                                    " lets group or others read it; it must be 0600 or narrower "
                                    "(chmod 600 " +
                                    path + ")");
  }
  if (static_cast<uint64_t>(st.st_size) != kSecretKeyBytes) {
    return Status::invalid_argument("secret key file " + path + ": " + std::to_string(st.st_size) +
                                    " bytes; a key is exactly " + std::to_string(kSecretKeyBytes));
  }
  std::string key(kSecretKeyBytes, '\0');
  size_t done = 0;
  while (done < key.size()) {
    const ssize_t n = ::read(fd.get(), key.data() + done, key.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return os_error(path, "read", errno);
    if (n == 0) return Status::invalid_argument("secret key file " + path + ": shrank while read");
    done += static_cast<size_t>(n);
  }
  return key;
}

// Steps 2-4. OK when a whole key file is at `path` afterwards (ours or a racing process's).
Status create_key_file(const std::string& path) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  std::string key(kSecretKeyBytes, '\0');
  KILN_CHECK(
      RAND_bytes(reinterpret_cast<unsigned char*>(key.data()), static_cast<int>(key.size())) == 1)
      << "RAND_bytes failed: OpenSSL has no entropy";
  UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (fd.get() < 0) return os_error(tmp, "open", errno);
  Status status;
  size_t done = 0;
  while (status.ok() && done < key.size()) {
    const ssize_t n = ::write(fd.get(), key.data() + done, key.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) status = os_error(tmp, "write", n < 0 ? errno : ENOSPC);
    if (n > 0) done += static_cast<size_t>(n);
  }
  OPENSSL_cleanse(key.data(), key.size());
  if (status.ok() && ::fsync(fd.get()) != 0) status = os_error(tmp, "fsync", errno);
  if (fd.close_now() != 0 && status.ok()) status = os_error(tmp, "close", errno);
  if (status.ok() && ::link(tmp.c_str(), path.c_str()) != 0 && errno != EEXIST) {
    status = os_error(path, "link", errno);
  }
  ::unlink(tmp.c_str());
  KILN_RETURN_IF_ERROR(status);
  return posix_file_system()->sync_dir(parent_dir(path));
}

}  // namespace

Result<SecretBox> SecretBox::open_key_file(const std::string& path) {
  Result<std::string> key = read_key_file(path);
  if (!key.ok() && key.status().is_not_found()) {
    KILN_RETURN_IF_ERROR(create_key_file(path));
    key = read_key_file(path);
  }
  if (!key.ok()) return key.status();
  return SecretBox(std::move(key).value());
}

SecretBox SecretBox::from_key_for_test(std::string key32) {
  KILN_CHECK_EQ(key32.size(), kSecretKeyBytes) << "an AES-256 key is 32 bytes";
  return SecretBox(std::move(key32));
}

SecretBox::~SecretBox() {
  if (!key_.empty()) OPENSSL_cleanse(key_.data(), key_.size());
}

std::string SecretBox::seal(std::string_view plaintext) const {
  KILN_CHECK_EQ(key_.size(), kSecretKeyBytes) << "seal() on a moved-from SecretBox";
  KILN_CHECK_LE(plaintext.size(), kPlaintextBytesMax)
      << "a secret of " << plaintext.size() << " bytes";
  std::string out(kSecretNonceBytes + plaintext.size() + kSecretTagBytes, '\0');
  auto* nonce = reinterpret_cast<unsigned char*>(out.data());
  unsigned char* cipher = nonce + kSecretNonceBytes;
  KILN_CHECK(RAND_bytes(nonce, static_cast<int>(kSecretNonceBytes)) == 1)
      << "RAND_bytes failed: OpenSSL has no entropy";
  CipherCtx ctx(EVP_CIPHER_CTX_new());
  KILN_CHECK(ctx != nullptr) << "EVP_CIPHER_CTX_new failed";
  int len = 0;
  int tail = 0;
  const bool ok =
      EVP_EncryptInit_ex(ctx.get(), EVP_aes_256_gcm(), nullptr, bytes(key_), nonce) == 1 &&
      EVP_EncryptUpdate(ctx.get(), cipher, &len, bytes(plaintext),
                        static_cast<int>(plaintext.size())) == 1 &&
      EVP_EncryptFinal_ex(ctx.get(), cipher + len, &tail) == 1 &&
      EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_GET_TAG, static_cast<int>(kSecretTagBytes),
                          cipher + plaintext.size()) == 1;
  KILN_CHECK(ok && static_cast<size_t>(len + tail) == plaintext.size())
      << "AES-256-GCM encryption failed";
  return out;
}

Result<std::string> SecretBox::open(std::string_view sealed) const {
  KILN_CHECK_EQ(key_.size(), kSecretKeyBytes) << "open() on a moved-from SecretBox";
  if (sealed.size() < kSecretNonceBytes + kSecretTagBytes) {
    return Status::corruption("sealed secret: " + std::to_string(sealed.size()) +
                              " bytes, shorter than a nonce and a tag (" +
                              std::to_string(kSecretNonceBytes + kSecretTagBytes) + ")");
  }
  const size_t text_bytes = sealed.size() - kSecretNonceBytes - kSecretTagBytes;
  if (text_bytes > kPlaintextBytesMax) {
    return Status::corruption("sealed secret: " + std::to_string(sealed.size()) +
                              " bytes, longer than anything seal() makes");
  }
  const unsigned char* nonce = bytes(sealed);
  const unsigned char* cipher = nonce + kSecretNonceBytes;
  // OpenSSL's tag setter takes a non-const pointer but only reads it.
  std::string tag(sealed.substr(kSecretNonceBytes + text_bytes));
  std::string out(text_bytes, '\0');
  auto* plain = reinterpret_cast<unsigned char*>(out.data());
  CipherCtx ctx(EVP_CIPHER_CTX_new());
  KILN_CHECK(ctx != nullptr) << "EVP_CIPHER_CTX_new failed";
  int len = 0;
  int tail = 0;
  const bool ok =
      EVP_DecryptInit_ex(ctx.get(), EVP_aes_256_gcm(), nullptr, bytes(key_), nonce) == 1 &&
      EVP_DecryptUpdate(ctx.get(), plain, &len, cipher, static_cast<int>(text_bytes)) == 1 &&
      EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_SET_TAG, static_cast<int>(kSecretTagBytes),
                          tag.data()) == 1 &&
      EVP_DecryptFinal_ex(ctx.get(), plain + len, &tail) == 1;
  if (!ok) {
    OPENSSL_cleanse(out.data(), out.size());
    return Status::corruption(
        "sealed secret: authentication failed (the bytes were changed, or "
        "sealed under another key)");
  }
  return out;
}

}  // namespace kiln::sched

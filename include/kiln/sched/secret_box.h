// SecretBox: authenticated encryption of small secrets (a job's secret environment values) with
// AES-256-GCM, under one 32-byte key kept in a file readable only by its owner.
//
// Sealed format (binary):
//   sealed := nonce[12] ciphertext[len(plaintext)] tag[16]
// A fresh random nonce per seal (RAND_bytes): with 96-bit random nonces, 2^32 seals under one key
// keep the collision chance below 2^-32 (NIST SP 800-38D, 8.3), far more than a coordinator's
// jobs. The tag covers the ciphertext, so a changed byte anywhere fails open() as kCorruption.
//
// Not a key manager: there is one key, no rotation, and whoever can read the key file can open
// every sealed value. What it buys is that the state database, its backups and its logs hold no
// secret in the clear.
//
// Thread-safe: seal() and open() are const and keep no state between calls.
#ifndef KILN_SCHED_SECRET_BOX_H_
#define KILN_SCHED_SECRET_BOX_H_

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>

#include <kiln/base/result.h>

namespace kiln::sched {

inline constexpr size_t kSecretKeyBytes = 32;    // AES-256
inline constexpr size_t kSecretNonceBytes = 12;  // GCM's native nonce size
inline constexpr size_t kSecretTagBytes = 16;    // GCM's full tag

class SecretBox {
 public:
  // Reads the key from `path`, or, when there is no file there, creates it with mode 0600 holding
  // 32 fresh random bytes (written to a temporary name, fsynced, then linked into place, so a
  // crash or a racing process never leaves a short key under `path`).
  // kInvalidArgument naming the path when the file is not a regular file, is not exactly 32
  // bytes, or has a mode wider than 0600 (readable by group or others); kIoError / kNotFound
  // naming the path for what the OS refuses.
  static Result<SecretBox> open_key_file(const std::string& path);

  // A box under `key32`. REQUIRES: key32.size() == kSecretKeyBytes.
  static SecretBox from_key_for_test(std::string key32);

  SecretBox(const SecretBox&) = default;
  SecretBox& operator=(const SecretBox&) = default;
  SecretBox(SecretBox&&) = default;
  SecretBox& operator=(SecretBox&&) = default;
  ~SecretBox();  // wipes the key

  // Seals `plaintext`: kSecretNonceBytes + plaintext.size() + kSecretTagBytes bytes. Crashes
  // (KILN_CHECK) only if OpenSSL cannot draw random bytes or encrypt, which no input causes.
  std::string seal(std::string_view plaintext) const;

  // The plaintext of a seal() under the same key. kCorruption when `sealed` is too short to be
  // one, or its tag does not match (a changed byte, another key).
  Result<std::string> open(std::string_view sealed) const;

 private:
  explicit SecretBox(std::string key) : key_(std::move(key)) {}
  std::string key_;  // kSecretKeyBytes bytes
};

}  // namespace kiln::sched

#endif  // KILN_SCHED_SECRET_BOX_H_

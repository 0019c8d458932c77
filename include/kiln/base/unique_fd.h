// UniqueFd: owns one file descriptor and closes it on destruction. Move-only.
#ifndef KILN_BASE_UNIQUE_FD_H_
#define KILN_BASE_UNIQUE_FD_H_

#include <unistd.h>

namespace kiln {

class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() { reset(); }
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  // Gives up ownership without closing.
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }
  // Closes what it holds (if anything) and takes `fd`.
  void reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }
  // Closes now and returns close()'s result, for a file just written whose close may report an
  // error; -1 with errno EBADF when nothing is held.
  int close_now() { return ::close(release()); }

 private:
  int fd_ = -1;
};

}  // namespace kiln

#endif  // KILN_BASE_UNIQUE_FD_H_

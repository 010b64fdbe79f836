#include "cli/output_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace gpumem::cli {

OutputFile::OutputFile(std::string path) : path_(std::move(path)) {
  if (path_ == "-") {
    fd_ = STDOUT_FILENO;
    owns_fd_ = false;
    return;
  }
  struct stat st {};
  bool exists = stat(path_.c_str(), &st) == 0;
  if (exists && !S_ISREG(st.st_mode)) {
    fd_ = open(path_.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC | O_NOCTTY);  // a directory: EISDIR
    if (fd_ < 0) fail(errno);
    return;
  }
  target_ = path_;
  mode_t mode = 0;
  if (exists) {
    if (access(path_.c_str(), W_OK) != 0) fail(errno);  // rename would replace a file we may not write
    if (char* real = realpath(path_.c_str(), nullptr)) {
      target_ = real;
      std::free(real);
    }
    mode = st.st_mode & 07777;
  } else {
    mode_t mask = umask(0);
    umask(mask);
    mode = 0666 & ~mask;
  }
  std::size_t slash = target_.rfind('/');
  std::string dir = slash == std::string::npos ? "." : target_.substr(0, slash + 1);
  std::string base = slash == std::string::npos ? target_ : target_.substr(slash + 1);
  temporary_ = (slash == std::string::npos ? "" : dir) + "." + base + ".gpumem-XXXXXX";
  fd_ = mkostemp(temporary_.data(), O_CLOEXEC);
  if (fd_ < 0) {
    const int err = errno;
    temporary_.clear();
    if (!exists) fail(err);  // the file would be made there: the directory's error is the file's
    // The error is the temporary's: name the file's own where it has one (/proc/version cannot be
    // written at all), else say that its directory takes no new file, which replacing it whole needs.
    const int probe = open(target_.c_str(), O_WRONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);  // no O_TRUNC
    if (probe < 0) fail(errno);
    close(probe);
    const std::string shown = dir.size() > 1 && dir.back() == '/' ? dir.substr(0, dir.size() - 1) : dir;
    throw OutputFileError("cannot write " + path_ + ": it is replaced whole through a new file beside it, and " +
                          shown + " takes no new file (" + std::strerror(err) + ")");
  }
  fchmod(fd_, mode);
}

OutputFile::~OutputFile() {
  if (fd_ >= 0 && owns_fd_) close(fd_);
  if (!committed_ && !temporary_.empty()) unlink(temporary_.c_str());
}

void OutputFile::fail(int err) const {
  throw OutputFileError("cannot write " + path_ + ": " + std::strerror(err));
}

void OutputFile::write(std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd_, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      fail(errno);
    }
    data.remove_prefix(std::size_t(n));
  }
}

void OutputFile::commit() {
  if (owns_fd_) {
    int fd = fd_;
    fd_ = -1;
    if (close(fd) != 0) fail(errno);  // NFS and full disks may say so only now
  }
  if (!temporary_.empty() && rename(temporary_.c_str(), target_.c_str()) != 0) fail(errno);
  committed_ = true;
}

}  // namespace gpumem::cli

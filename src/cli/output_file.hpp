// A file a command writes whole or not at all (`gpumem snapshot -o FILE`).
// - A regular file, or a new one, is written to a temporary beside it (mode: the old file's, or 0666 less
//   the umask) and renamed over it by commit(): a transfer that fails leaves the old file, or none. A
//   symlink to a file is followed: the file it names is replaced.
// - Anything else that exists (a FIFO, /dev/stdout) is written in place; "-" is stdout.
// - The constructor checks that the file can be written, before the command does any work.
// Errors throw OutputFileError with one sentence ("cannot write FILE: reason").
#pragma once
#include <stdexcept>
#include <string>
#include <string_view>

namespace gpumem::cli {

class OutputFileError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class OutputFile {
 public:
  explicit OutputFile(std::string path);
  ~OutputFile();  // not committed: the temporary is removed
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  void write(std::string_view data);
  void commit();

 private:
  [[noreturn]] void fail(int err) const;

  std::string path_;
  std::string target_;     // what the temporary replaces ("" when written in place)
  std::string temporary_;  // "" when written in place
  int fd_ = -1;
  bool owns_fd_ = true;  // false for stdout
  bool committed_ = false;
};

}  // namespace gpumem::cli

// A stand-in for PyTorch's libc10 exception classes, declared the way c10/util/Exception.h declares them
// (same names, same constructor signature, OutOfMemoryError adding no members), so the test can catch
// c10::OutOfMemoryError& from gpumem_malloc as PyTorch's bindings do. Built as libc10.so by the test.
#pragma once
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <vector>

namespace c10 {

struct SourceLocation {
  const char* function;
  const char* file;
  std::uint32_t line;
};

class Error : public std::exception {
 public:
  Error(SourceLocation source_location, std::string msg);
  ~Error() override;
  const char* what() const noexcept override { return what_.c_str(); }
  const std::string& msg() const { return msg_; }
  const char* function() const { return function_; }

 private:
  std::string msg_;
  std::vector<std::string> context_;
  std::shared_ptr<const std::string> backtrace_;
  std::string what_;
  const char* function_ = nullptr;
};

class OutOfMemoryError : public Error {
  using Error::Error;
};

}  // namespace c10

// The stand-in libc10.so (see fake_c10.hpp). Its exception destructor counts, so the test can tell the
// exception gpumem built was destroyed once, through the right vtable.
#include "fake_c10.hpp"

extern "C" {
int fake_c10_destroyed = 0;
}

namespace c10 {

Error::Error(SourceLocation source_location, std::string msg)
    : msg_(std::move(msg)),
      backtrace_(std::make_shared<const std::string>("Exception raised from " +
                                                     std::string(source_location.function))),
      what_(msg_ + "\n" + *backtrace_),
      function_(source_location.function) {}

Error::~Error() { ++fake_c10_destroyed; }

}  // namespace c10

// Uses OutOfMemoryError's vtable and typeinfo here, so this library defines and exports them as libc10 does.
extern "C" void fake_c10_throw_out_of_memory() { throw c10::OutOfMemoryError({"here", __FILE__, __LINE__}, "x"); }

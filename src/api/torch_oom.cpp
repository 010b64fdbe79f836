// Builds and throws a c10::OutOfMemoryError the way c10's own `throw OutOfMemoryError(loc, msg)` does:
// storage from __cxa_allocate_exception, c10::Error's exported constructor run on it, the vtable pointer
// switched to OutOfMemoryError's (the class adds no members: `using Error::Error`), then __cxa_throw with
// its typeinfo and destructor. Every symbol comes from the loaded libc10 by name; no PyTorch headers.
#include "api/torch_oom.hpp"

#include <cxxabi.h>
#include <dlfcn.h>

#include <cstdint>
#include <cstring>
#include <mutex>
#include <typeinfo>

#include "gpumem/gpumem.h"

namespace gpumem::api {
namespace {

static_assert(_GLIBCXX_USE_CXX11_ABI, "c10::Error's constructor takes the C++11-ABI std::string");

// c10::SourceLocation (c10/util/Exception.h), passed by value.
struct C10SourceLocation {
  const char* function;
  const char* file;
  std::uint32_t line;
};
// c10::Error::Error(SourceLocation, std::string) as the Itanium C++ ABI calls it: `this` first, the string
// by invisible reference to a temporary the caller destroys.
using ErrorConstructor = void (*)(void* self, C10SourceLocation, std::string);
using Destructor = void (*)(void*);

constexpr const char* kConstructors[] = {
    "_ZN3c105ErrorC2ENS_14SourceLocationENSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE",
    "_ZN3c105ErrorC1ENS_14SourceLocationENSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE"};
constexpr const char* kVtable = "_ZTVN3c1016OutOfMemoryErrorE";
constexpr const char* kTypeinfo = "_ZTIN3c1016OutOfMemoryErrorE";
constexpr const char* kTypeName = "N3c1016OutOfMemoryErrorE";
// c10::Error is ~130 bytes (vptr, two strings, a vector, a shared_ptr, a lazy string, a pointer); the
// exception object gets room to spare so a c10 that grows a member stays inside it.
constexpr std::size_t kObjectBytes = 1024;

struct C10OutOfMemory {
  ErrorConstructor construct = nullptr;
  void* vptr = nullptr;          // the first word of a constructed OutOfMemoryError
  Destructor destroy = nullptr;  // its complete-object destructor: the vtable's first virtual slot
  std::type_info* type = nullptr;
};

void* find_symbol(const char* name) {
  if (void* p = dlsym(RTLD_DEFAULT, name)) return p;
  // Python imports torch's extension RTLD_LOCAL, so libc10 may be outside the global scope. libc10.so exports
  // c10::Error's constructors but not OutOfMemoryError's vtable and typeinfo: those are weak copies in the
  // libraries that throw or catch it (PyTorch 2.11: libc10_cuda, libtorch_cuda, libtorch_python). Any copy
  // serves: libstdc++ matches exception types by name.
  for (const char* lib : {"libc10.so", "libc10_cuda.so", "libtorch_cuda.so", "libtorch_python.so", "libtorch_cpu.so"}) {
    if (void* handle = dlopen(lib, RTLD_LAZY | RTLD_NOLOAD)) {
      void* p = dlsym(handle, name);
      dlclose(handle);
      if (p) return p;
    }
  }
  return nullptr;
}

// Looks the symbols up until they are all found once (torch may be imported after an earlier OOM).
const C10OutOfMemory* lookup() noexcept {
  static std::mutex mutex;
  static C10OutOfMemory found;
  static bool complete = false;
  std::lock_guard lock(mutex);
  if (complete) return &found;
  C10OutOfMemory s;
  for (const char* name : kConstructors) {
    if (!s.construct) s.construct = reinterpret_cast<ErrorConstructor>(find_symbol(name));
  }
  auto* vtable = static_cast<void**>(find_symbol(kVtable));
  s.type = static_cast<std::type_info*>(find_symbol(kTypeinfo));
  if (!s.construct || !vtable || !s.type) return nullptr;
  // The vtable must be the one we think: offset-to-top 0, then this class's typeinfo, then the slots.
  auto* slot_type = static_cast<const std::type_info*>(vtable[1]);
  if (vtable[0] != nullptr || !slot_type || std::strcmp(slot_type->name(), kTypeName) != 0 ||
      std::strcmp(s.type->name(), kTypeName) != 0 || vtable[2] == nullptr)
    return nullptr;
  s.vptr = vtable + 2;
  s.destroy = reinterpret_cast<Destructor>(vtable[2]);
  found = s;
  complete = true;
  return &found;
}

}  // namespace

bool c10_out_of_memory_available() noexcept { return lookup() != nullptr; }

void throw_torch_out_of_memory(const OutOfMemoryError& fallback) {
  const C10OutOfMemory* c10 = lookup();
  if (!c10) {
    // PyTorch will show a RuntimeError: the marker lets `gpumem run` still recognise the OOM.
    if (std::strstr(fallback.what(), GPUMEM_OOM_MARKER)) throw fallback;
    throw OutOfMemoryError(std::string(GPUMEM_OOM_MARKER) + ": " + fallback.what(), fallback.state());
  }
  void* object = abi::__cxa_allocate_exception(kObjectBytes);
  try {
    c10->construct(object, C10SourceLocation{"gpumem_malloc", __FILE__, __LINE__}, std::string(fallback.what()));
  } catch (...) {
    abi::__cxa_free_exception(object);
    throw fallback;
  }
  *static_cast<void**>(object) = c10->vptr;
  abi::__cxa_throw(object, c10->type, c10->destroy);
}

}  // namespace gpumem::api

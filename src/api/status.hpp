// Status codes and messages of the C ABI (gpumem.h): every entry point maps the exception in flight to a
// GPUMEM_E* code and keeps its sentence for gpumem_last_error(), per thread. Shared by the C ABI's files.
#pragma once
#include <algorithm>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>

#include "gpumem/errors.hpp"
#include "gpumem/gpumem.h"

namespace gpumem::api {

inline thread_local std::string tls_last_error;

// Maps the exception in flight to a status code and remembers its sentence for gpumem_last_error().
inline int status_of_current_exception() noexcept {
  try {
    throw;
  } catch (const OutOfMemoryError& e) {
    tls_last_error = e.what();
    return GPUMEM_E_OOM;
  } catch (const BackendError& e) {
    tls_last_error = e.what();
    return GPUMEM_E_BACKEND;
  } catch (const std::invalid_argument& e) {
    tls_last_error = e.what();
    return GPUMEM_E_INVALID;
  } catch (const Error& e) {
    tls_last_error = e.what();
    return GPUMEM_E_INVALID;
  } catch (const std::exception& e) {
    tls_last_error = std::string("gpumem: internal error: ") + e.what();
    return GPUMEM_E_INTERNAL;
  } catch (...) {
    tls_last_error = "gpumem: internal error of unknown kind";
    return GPUMEM_E_INTERNAL;
  }
}

template <typename Fn>
int guarded(Fn&& fn) noexcept {
  try {
    fn();
    return GPUMEM_OK;
  } catch (...) {
    return status_of_current_exception();
  }
}

// Copies text into buf as the header promises: NUL-terminated, truncated to fit; returns the full length.
inline int copy_out(const std::string& text, char* buf, size_t len) {
  if (text.size() > std::size_t(std::numeric_limits<int>::max())) throw std::length_error("gpumem: text too long");
  if (buf && len > 0) {
    std::size_t n = std::min(text.size(), len - 1);
    std::memcpy(buf, text.data(), n);
    buf[n] = '\0';
  }
  return int(text.size());
}

template <typename Fn>
int guarded_text(char* buf, size_t len, Fn&& fn) noexcept {
  try {
    return copy_out(fn(), buf, len);
  } catch (...) {
    return status_of_current_exception();
  }
}

// A query that cannot report failure returns 0 and leaves the reason in gpumem_last_error().
template <typename Fn>
size_t guarded_size(Fn&& fn) noexcept {
  try {
    return fn();
  } catch (...) {
    status_of_current_exception();
    return 0;
  }
}

inline void remember_error(const char* sentence) { tls_last_error = sentence; }

}  // namespace gpumem::api

// call_errors.hpp (private): how a store's status, and whatever a handler threw, becomes the
// call_error a caller sees, both through the error table (factum/entities/problems.hpp). Pure
// functions; any thread.
#pragma once

#include <exception>
#include <utility>

#include "factum/entities/errors.hpp"
#include "factum/entities/problems.hpp"
#include "factum/error/status.hpp"

namespace factum::detail {

/// The call_error of a storage failure: problem_of(st.code()) with the status's message (e.g.
/// corruption 500 ENTITY_STORAGE_CORRUPT; a full disk 503 STORAGE_FULL, retryable).
inline call_error storage_error(const status& st) {
  return problem_of(st.code()).error(st.message());
}

/// The call_error of whatever a handler threw: a call_error as it is, a JSON error 400
/// INVALID_ARGUMENT, anything else 500 HANDLER_FAILED.
call_error to_call_error(std::exception_ptr err);

/// A store's failure thrown as its storage_error (a turn then fails with it).
inline void throw_if(const status& st) {
  if (!st)
    throw storage_error(st);
}

/// A store's value, or its failure thrown as its storage_error.
template <class T> T value_or_throw(result<T> r) {
  if (!r)
    throw storage_error(r.error());
  return std::move(r.value());
}

} // namespace factum::detail

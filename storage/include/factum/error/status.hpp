// factum/error/status.hpp: status and result<T>, the error currency of every factum library (the
// store, the runtime, the cluster, the tools). How a status is answered over HTTP is the error
// table's (factum/entities/problems.hpp). Plain value types; any thread.
#pragma once

#include <cassert>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace factum {

/// Stable error codes. Their names (to_string) appear in logs and CLI messages; an HTTP answer
/// carries the problem code the error table maps them to (problem_of in
/// factum/entities/problems.hpp).
enum class errc {
  ok = 0,
  invalid_argument, ///< bad input from a caller (key, filter, fact field)
  not_found,        ///< no such entity, fact, key, alarm, dead letter or config
  conflict,         ///< a precondition on stored state failed (e.g. an immutable row exists)
  corruption,       ///< the file is not a database, or its contents break an invariant
  not_factum_file,  ///< a SQLite file that factum did not create
  newer_schema,     ///< written by a newer factum: refuse rather than misread it
  io_error,         ///< the operating system failed a read, write or fsync
  full,             ///< disk or page-count limit reached
  read_only,        ///< a write on a read-only store or directory
  busy,             ///< the database is locked by another connection
  unavailable,      ///< the runtime is stopping or the entity cannot be reached
  internal,         ///< a bug: an invariant of factum itself failed
  /// the entity file's owner epoch is newer than this store's claim: another node owns the
  /// entity now (entity_store::claim_owner; docs/storage-format.md section 15)
  not_owner,
  /// a tenant's quota has no room for what was asked (a fork into a tenant at its
  /// max_entities)
  quota_exceeded,
};

/// Returns the stable upper-case name of a code, e.g. "INVALID_ARGUMENT".
std::string_view to_string(errc code) noexcept;

/// Outcome of an operation: ok, or an error code with a human-readable message.
class [[nodiscard]] status {
 public:
  // -- constructors --
  status() noexcept = default;
  status(errc code, std::string message) : code_(code), message_(std::move(message)) {}

  static status ok() noexcept { return {}; }

  // -- observers --
  bool is_ok() const noexcept { return code_ == errc::ok; }
  explicit operator bool() const noexcept { return is_ok(); }
  errc code() const noexcept { return code_; }
  const std::string& message() const noexcept { return message_; }

  /// "CODE: message", or "OK".
  std::string to_string() const;

 private:
  errc code_ = errc::ok;
  std::string message_;
};

/// A value or an error status. Accessing the value of an error is a bug (asserts).
template <class T> class [[nodiscard]] result {
 public:
  result(T value) : v_(std::move(value)) {}
  result(status err) : v_(std::move(err)) { assert(!std::get<status>(v_).is_ok()); }

  bool is_ok() const noexcept { return v_.index() == 0; }
  explicit operator bool() const noexcept { return is_ok(); }

  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

  /// The error; status::ok() when this holds a value.
  status error() const { return is_ok() ? status::ok() : std::get<status>(v_); }

 private:
  std::variant<T, status> v_;
};

} // namespace factum

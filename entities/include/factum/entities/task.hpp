// factum/entities/task.hpp: task<T>, the coroutine type of entity handlers. Lazy: it starts when
// awaited (or when the runtime starts it), resumes its awaiter by symmetric transfer when done.
// A task runs on its entity's actor thread; it is never touched by two threads at once.
#pragma once

#include <coroutine>
#include <exception>
#include <optional>
#include <utility>

namespace factum {

template <class T = void> class task;

namespace detail {

struct task_promise_base {
  std::coroutine_handle<> continuation;
  std::exception_ptr error;

  std::suspend_always initial_suspend() noexcept { return {}; }

  struct final_awaiter {
    bool await_ready() const noexcept { return false; }
    template <class P> std::coroutine_handle<> await_suspend(std::coroutine_handle<P> h) noexcept {
      auto c = h.promise().continuation;
      return c ? c : std::noop_coroutine();
    }
    void await_resume() const noexcept {}
  };
  final_awaiter final_suspend() noexcept { return {}; }
  void unhandled_exception() noexcept { error = std::current_exception(); }
};

template <class T> struct task_promise : task_promise_base {
  std::optional<T> value;
  task<T> get_return_object() noexcept;
  template <class U> void return_value(U&& v) { value.emplace(std::forward<U>(v)); }
  T take() {
    if (error)
      std::rethrow_exception(error);
    return std::move(*value);
  }
};

template <> struct task_promise<void> : task_promise_base {
  task<void> get_return_object() noexcept;
  void return_void() noexcept {}
  void take() {
    if (error)
      std::rethrow_exception(error);
  }
};

} // namespace detail

/// A lazily started coroutine producing T (or throwing). Await it with co_await.
template <class T> class [[nodiscard]] task {
 public:
  using promise_type = detail::task_promise<T>;
  using handle_type = std::coroutine_handle<promise_type>;

  task() noexcept = default;
  explicit task(handle_type h) noexcept : h_(h) {}
  task(task&& other) noexcept : h_(std::exchange(other.h_, {})) {}
  task& operator=(task&& other) noexcept {
    if (this != &other) {
      if (h_)
        h_.destroy();
      h_ = std::exchange(other.h_, {});
    }
    return *this;
  }
  task(const task&) = delete;
  task& operator=(const task&) = delete;
  ~task() {
    if (h_)
      h_.destroy();
  }

  bool valid() const noexcept { return static_cast<bool>(h_); }

  // -- awaitable --
  bool await_ready() const noexcept { return false; }
  std::coroutine_handle<> await_suspend(std::coroutine_handle<> awaiter) noexcept {
    h_.promise().continuation = awaiter;
    return h_;
  }
  T await_resume() { return h_.promise().take(); }

 private:
  handle_type h_;
};

namespace detail {

template <class T> task<T> task_promise<T>::get_return_object() noexcept {
  return task<T>{std::coroutine_handle<task_promise<T>>::from_promise(*this)};
}

inline task<void> task_promise<void>::get_return_object() noexcept {
  return task<void>{std::coroutine_handle<task_promise<void>>::from_promise(*this)};
}

/// A coroutine that starts at once and destroys itself at the end: the root of a turn.
struct detached {
  struct promise_type {
    detached get_return_object() noexcept { return {}; }
    std::suspend_never initial_suspend() noexcept { return {}; }
    std::suspend_never final_suspend() noexcept { return {}; }
    void return_void() noexcept {}
    void unhandled_exception() noexcept { std::terminate(); }
  };
};

} // namespace detail

/// Runs `t` to completion and calls `done(std::exception_ptr, std::optional<T>)`, possibly
/// before returning (when `t` never suspends).
template <class T, class Done> void start_task(task<T> t, Done done) {
  [](task<T> t, Done done) -> detail::detached {
    std::exception_ptr err;
    std::optional<T> v;
    try {
      v.emplace(co_await t);
    } catch (...) {
      err = std::current_exception();
    }
    done(err, std::move(v));
  }(std::move(t), std::move(done));
}

/// Overload for task<void>: `done(std::exception_ptr)`.
template <class Done> void start_task(task<void> t, Done done) {
  [](task<void> t, Done done) -> detail::detached {
    std::exception_ptr err;
    try {
      co_await t;
    } catch (...) {
      err = std::current_exception();
    }
    done(err);
  }(std::move(t), std::move(done));
}

} // namespace factum

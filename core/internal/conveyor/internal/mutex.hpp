// Mutexes the compiler checks: std::mutex and std::shared_mutex wrapped as
// clang capabilities (thread_annotations.hpp), the RAII locks that hold
// them, and condition variables that wait on them. Under clang with
// -Wthread-safety, data marked GUARDED_BY(mu_) touched without mu_ held is a
// compile error; elsewhere these are the std types with other names.
//
//   class Queue {
//    public:
//     void push(int v) EXCLUDES(mu_) {
//       MutexLock lock(mu_);
//       items_.push_back(v);
//       cv_.notify_one();
//     }
//     int pop() EXCLUDES(mu_) {
//       MutexLock lock(mu_);
//       while (items_.empty()) cv_.wait(mu_);  // the loop form is checked
//       return take_front();
//     }
//    private:
//     int take_front() REQUIRES(mu_);
//     Mutex mu_;
//     CondVar cv_;
//     std::deque<int> items_ GUARDED_BY(mu_);
//   };
//
// A lambda's body is checked as a function of its own, holding nothing: a
// wait predicate (called with the mutex held) that reads guarded data starts
// with mu_.AssertHeld(), or the wait is written as a loop, as above.
#pragma once

#include <conveyor/internal/thread_annotations.hpp>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <shared_mutex>
#include <stop_token>

namespace conveyor {

// std::mutex as a capability. Not recursive; all methods thread-safe.
class CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  // Blocks until this thread holds the mutex.
  void lock() ACQUIRE() { mu_.lock(); }
  // Gives the mutex up; this thread must hold it.
  void unlock() RELEASE() { mu_.unlock(); }
  // Takes the mutex if free (true), without blocking.
  bool try_lock() TRY_ACQUIRE(true) { return mu_.try_lock(); }
  // Tells the analysis this thread holds the mutex, where it cannot see so
  // (a lambda run under the lock). Checks nothing at run time.
  void AssertHeld() const ASSERT_CAPABILITY(this) {}

 private:
  friend class CondVar;
  friend class CondVarAny;
  std::mutex mu_;
};

// std::shared_mutex as a capability: one writer (lock) or many readers
// (lock_shared). All methods thread-safe.
class CAPABILITY("mutex") SharedMutex {
 public:
  SharedMutex() = default;
  SharedMutex(const SharedMutex&) = delete;
  SharedMutex& operator=(const SharedMutex&) = delete;

  void lock() ACQUIRE() { mu_.lock(); }
  void unlock() RELEASE() { mu_.unlock(); }
  void lock_shared() ACQUIRE_SHARED() { mu_.lock_shared(); }
  void unlock_shared() RELEASE_SHARED() { mu_.unlock_shared(); }
  // As Mutex::AssertHeld, for a writer / for a reader or writer.
  void AssertHeld() const ASSERT_CAPABILITY(this) {}
  void AssertReaderHeld() const ASSERT_SHARED_CAPABILITY(this) {}

 private:
  std::shared_mutex mu_;
};

// Holds a Mutex from construction to destruction, like std::unique_lock:
// unlock() gives it up early (say, around a call that must not run under
// it) and lock() takes it again. Belongs to the thread that made it.
class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) ACQUIRE(mu) : mu_(mu) { mu_.lock(); }
  ~MutexLock() RELEASE() {
    if (held_) mu_.unlock();
  }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  // Gives the mutex up before the end of the scope; must be held.
  void unlock() RELEASE() {
    held_ = false;
    mu_.unlock();
  }
  // Takes the mutex again after unlock().
  void lock() ACQUIRE() {
    mu_.lock();
    held_ = true;
  }

 private:
  Mutex& mu_;
  bool held_ = true;
};

// Holds a SharedMutex as its writer for the scope.
class SCOPED_CAPABILITY WriterMutexLock {
 public:
  explicit WriterMutexLock(SharedMutex& mu) ACQUIRE(mu) : mu_(mu) { mu_.lock(); }
  ~WriterMutexLock() RELEASE() { mu_.unlock(); }
  WriterMutexLock(const WriterMutexLock&) = delete;
  WriterMutexLock& operator=(const WriterMutexLock&) = delete;

 private:
  SharedMutex& mu_;
};

// Holds a SharedMutex as one of its readers for the scope.
class SCOPED_CAPABILITY ReaderMutexLock {
 public:
  explicit ReaderMutexLock(SharedMutex& mu) ACQUIRE_SHARED(mu) : mu_(mu) { mu_.lock_shared(); }
  ~ReaderMutexLock() RELEASE() { mu_.unlock_shared(); }
  ReaderMutexLock(const ReaderMutexLock&) = delete;
  ReaderMutexLock& operator=(const ReaderMutexLock&) = delete;

 private:
  SharedMutex& mu_;
};

namespace detail {
// Lends a held std::mutex to a std::unique_lock for one wait, and takes it
// back even if the wait's predicate throws: the caller's lock still owns it.
struct Adopted {
  explicit Adopted(std::mutex& mu) : lock(mu, std::adopt_lock) {}
  ~Adopted() { lock.release(); }
  std::unique_lock<std::mutex> lock;
};
}  // namespace detail

// std::condition_variable over a Mutex. Each wait gives mu up while it
// sleeps and holds it again when it returns, as the std waits do (spurious
// wake-ups included, for the forms without a predicate). Predicates run with
// mu held. notify_* may be called with or without mu held.
class CondVar {
 public:
  void notify_one() noexcept { cv_.notify_one(); }
  void notify_all() noexcept { cv_.notify_all(); }

  void wait(Mutex& mu) REQUIRES(mu) {
    detail::Adopted a(mu.mu_);
    cv_.wait(a.lock);
  }
  template <typename Pred>
  void wait(Mutex& mu, Pred pred) REQUIRES(mu) {
    detail::Adopted a(mu.mu_);
    cv_.wait(a.lock, std::move(pred));
  }
  // std::cv_status::timeout once t has passed.
  template <typename Clock, typename Duration>
  std::cv_status wait_until(Mutex& mu, const std::chrono::time_point<Clock, Duration>& t)
      REQUIRES(mu) {
    detail::Adopted a(mu.mu_);
    return cv_.wait_until(a.lock, t);
  }
  // pred() at the end: false when t passed first.
  template <typename Clock, typename Duration, typename Pred>
  bool wait_until(Mutex& mu, const std::chrono::time_point<Clock, Duration>& t, Pred pred)
      REQUIRES(mu) {
    detail::Adopted a(mu.mu_);
    return cv_.wait_until(a.lock, t, std::move(pred));
  }
  template <typename Rep, typename Period>
  std::cv_status wait_for(Mutex& mu, const std::chrono::duration<Rep, Period>& d) REQUIRES(mu) {
    detail::Adopted a(mu.mu_);
    return cv_.wait_for(a.lock, d);
  }
  template <typename Rep, typename Period, typename Pred>
  bool wait_for(Mutex& mu, const std::chrono::duration<Rep, Period>& d, Pred pred) REQUIRES(mu) {
    detail::Adopted a(mu.mu_);
    return cv_.wait_for(a.lock, d, std::move(pred));
  }

 private:
  std::condition_variable cv_;
};

// std::condition_variable_any over a Mutex, for waits a std::stop_token
// also ends (a stop request wakes the waiter). Each returns pred(): false
// when the stop (or t) came first. Otherwise as CondVar.
class CondVarAny {
 public:
  void notify_one() noexcept { cv_.notify_one(); }
  void notify_all() noexcept { cv_.notify_all(); }

  template <typename Pred>
  bool wait(Mutex& mu, std::stop_token stop, Pred pred) REQUIRES(mu) {
    detail::Adopted a(mu.mu_);
    return cv_.wait(a.lock, std::move(stop), std::move(pred));
  }
  template <typename Clock, typename Duration, typename Pred>
  bool wait_until(Mutex& mu, std::stop_token stop,
                  const std::chrono::time_point<Clock, Duration>& t, Pred pred) REQUIRES(mu) {
    detail::Adopted a(mu.mu_);
    return cv_.wait_until(a.lock, std::move(stop), t, std::move(pred));
  }
  template <typename Rep, typename Period, typename Pred>
  bool wait_for(Mutex& mu, std::stop_token stop, const std::chrono::duration<Rep, Period>& d,
                Pred pred) REQUIRES(mu) {
    detail::Adopted a(mu.mu_);
    return cv_.wait_for(a.lock, std::move(stop), d, std::move(pred));
  }

 private:
  std::condition_variable_any cv_;
};

}  // namespace conveyor

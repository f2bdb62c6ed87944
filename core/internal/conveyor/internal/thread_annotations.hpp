// Clang thread-safety annotations
// (https://clang.llvm.org/docs/ThreadSafetyAnalysis.html): the compiler
// checks, under -Wthread-safety, that data marked GUARDED_BY(mu) is only
// touched with mu held, that a function marked REQUIRES(mu) is only called
// with it held, and EXCLUDES(mu) without. Build with
// -DCONVEYOR_THREAD_SAFETY=ON and clang to turn the check on (scripts/test.sh
// does). Other compilers see no-ops.
//
// Each macro is defined only if no other header has (the names are the
// customary ones, as in LevelDB and the clang documentation).
#pragma once

#if defined(__clang__)
#define CONVEYOR_THREAD_ANNOTATION_(x) __attribute__((x))
#else
#define CONVEYOR_THREAD_ANNOTATION_(x)
#endif

// On a class: its objects are a capability (a mutex) of the given kind.
#ifndef CAPABILITY
#define CAPABILITY(x) CONVEYOR_THREAD_ANNOTATION_(capability(x))
#endif
// On a class: an RAII object holding a capability for its lifetime.
#ifndef SCOPED_CAPABILITY
#define SCOPED_CAPABILITY CONVEYOR_THREAD_ANNOTATION_(scoped_lockable)
#endif

// On data: read or written only with the capability held.
#ifndef GUARDED_BY
#define GUARDED_BY(x) CONVEYOR_THREAD_ANNOTATION_(guarded_by(x))
#endif
// On a pointer: what it points at is read or written only with x held.
#ifndef PT_GUARDED_BY
#define PT_GUARDED_BY(x) CONVEYOR_THREAD_ANNOTATION_(pt_guarded_by(x))
#endif
// On a mutex: the order in which it is taken relative to others
// (checked only with -Wthread-safety-beta).
#ifndef ACQUIRED_AFTER
#define ACQUIRED_AFTER(...) CONVEYOR_THREAD_ANNOTATION_(acquired_after(__VA_ARGS__))
#endif
#ifndef ACQUIRED_BEFORE
#define ACQUIRED_BEFORE(...) CONVEYOR_THREAD_ANNOTATION_(acquired_before(__VA_ARGS__))
#endif

// On a function: callers hold the capabilities (exclusively / shared).
#ifndef REQUIRES
#define REQUIRES(...) CONVEYOR_THREAD_ANNOTATION_(requires_capability(__VA_ARGS__))
#endif
#ifndef REQUIRES_SHARED
#define REQUIRES_SHARED(...) CONVEYOR_THREAD_ANNOTATION_(requires_shared_capability(__VA_ARGS__))
#endif
// On a function: it takes (and returns holding) / gives up the capabilities;
// with no argument, the object's own.
#ifndef ACQUIRE
#define ACQUIRE(...) CONVEYOR_THREAD_ANNOTATION_(acquire_capability(__VA_ARGS__))
#endif
#ifndef ACQUIRE_SHARED
#define ACQUIRE_SHARED(...) CONVEYOR_THREAD_ANNOTATION_(acquire_shared_capability(__VA_ARGS__))
#endif
#ifndef RELEASE
#define RELEASE(...) CONVEYOR_THREAD_ANNOTATION_(release_capability(__VA_ARGS__))
#endif
#ifndef RELEASE_SHARED
#define RELEASE_SHARED(...) CONVEYOR_THREAD_ANNOTATION_(release_shared_capability(__VA_ARGS__))
#endif
// On a function: it takes the capability when it returns the given value.
#ifndef TRY_ACQUIRE
#define TRY_ACQUIRE(...) CONVEYOR_THREAD_ANNOTATION_(try_acquire_capability(__VA_ARGS__))
#endif
// On a function: callers must not hold the capabilities (it takes them).
#ifndef EXCLUDES
#define EXCLUDES(...) CONVEYOR_THREAD_ANNOTATION_(locks_excluded(__VA_ARGS__))
#endif
// On a function: after it returns, the capability is known to be held
// (a run-time check, or a promise, the analysis takes on trust).
#ifndef ASSERT_CAPABILITY
#define ASSERT_CAPABILITY(x) CONVEYOR_THREAD_ANNOTATION_(assert_capability(x))
#endif
#ifndef ASSERT_SHARED_CAPABILITY
#define ASSERT_SHARED_CAPABILITY(x) CONVEYOR_THREAD_ANNOTATION_(assert_shared_capability(x))
#endif
// On a function: it returns a reference to the capability x.
#ifndef RETURN_CAPABILITY
#define RETURN_CAPABILITY(x) CONVEYOR_THREAD_ANNOTATION_(lock_returned(x))
#endif
// On a function: not checked. The escape of last resort: use on one small
// function, with a comment saying what the analysis cannot see.
#ifndef NO_THREAD_SAFETY_ANALYSIS
#define NO_THREAD_SAFETY_ANALYSIS CONVEYOR_THREAD_ANNOTATION_(no_thread_safety_analysis)
#endif

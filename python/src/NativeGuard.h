//===- NativeGuard.h - The callable Dynamo's root guard invokes -*- C++ -*-===//
//
// A C-level callable `f(f_locals) -> bool` (a PyCFunction with METH_O) that
// runs one compile unit's check: the native function when compiled, the
// interpreter otherwise. It is installed as the only leaf guard of a fresh
// RootGuardManager (a LAMBDA_GUARD), so Dynamo's cache lookup calls it with
// the frame locals dict.
//
//===----------------------------------------------------------------------===//
#ifndef GUARDJIT_PYTHON_NATIVEGUARD_H
#define GUARDJIT_PYTHON_NATIVEGUARD_H

#include "guardjit/Runtime/BoundGuardSet.h"
#include "guardjit/Runtime/Interpreter.h"
#include "guardjit/Runtime/SubtreeSkip.h"

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace guardjit {
class CompiledCheck;

struct CheckTarget;

/// Subtree skipping of one target (Runtime/SubtreeSkip.h): the plan, the
/// residual check as its own target (compiled in the background like a
/// tier-up; skipping starts once it is native, or at once when the full check
/// is interpreted too), and what turns skipping off for good. GIL held.
struct SkipState {
  std::unique_ptr<SkipPlan> Plan;
  std::shared_ptr<CheckTarget> Residual;
  /// Consecutive calls whose recorded state had changed / could not be
  /// recorded; at MaxMissRun the target stops skipping (a unit whose modules
  /// change on every call would pay validation and recording for nothing).
  uint32_t MissRun = 0;
  uint32_t RecordFailRun = 0;
  bool Disabled = false;
  static constexpr uint32_t MaxMissRun = 8;
};

/// What a NativeGuard callable runs. Calls and the counters need the GIL;
/// the background tier (TierUp.h) replaces the code without it: it stores Fn
/// (release) after Native under CodeLock, so a call loads Fn (acquire) once
/// and runs code that stays alive as long as this target.
struct CheckTarget {
  CheckTarget() { Live.fetch_add(1, std::memory_order_relaxed); }
  ~CheckTarget() { Live.fetch_sub(1, std::memory_order_relaxed); }
  CheckTarget(const CheckTarget &) = delete;
  CheckTarget &operator=(const CheckTarget &) = delete;
  /// Targets alive in this process (each holds a bound set and its code):
  /// what the eviction tests count.
  static inline std::atomic<int64_t> Live{0};

  std::shared_ptr<BoundGuardSet> Bound;
  std::atomic<CheckFn> Fn{nullptr}; ///< null: interpreter
  /// The OptLevel (as int) of Fn's code; -1 for the interpreter.
  std::atomic<int> Level{-1};
  /// The highest OptLevel (as int) a recompile was queued at; -1 for none.
  std::atomic<int> QueuedLevel{-1};
  uint64_t Calls = 0;
  uint64_t Failures = 0;

  std::mutex CodeLock; ///< guards Native and Retired
  std::shared_ptr<CompiledCheck> Native; ///< the code of Fn
  /// Code Fn pointed to before: a call may still be running it. Freed by the
  /// first call that ends with no other call of this target in flight
  /// (freeRetired), or with the target.
  std::vector<std::shared_ptr<CompiledCheck>> Retired;
  std::atomic<bool> RetiredPending{false}; ///< Retired is not empty
  /// Calls of this target running now, on any thread (a guard that calls
  /// Python lets other threads run, and they may call it too). GIL held.
  uint32_t InFlight = 0;
  /// New code not yet verified (set by the background tier before it
  /// publishes Fn): the first call that runs exactly this function also
  /// runs the interpreter, and a disagreement uninstalls the code for good
  /// (slower, never wrong; counted in Distrusted). A call that still runs
  /// the code it replaces does not consume it.
  std::atomic<CheckFn> Unverified{nullptr};
  std::atomic<bool> Distrusted{false};

  /// Set once, before the callable exists; null: the full check every call.
  std::unique_ptr<SkipState> Skip;
};

/// Runs the check of `T` on `FrameLocals` (borrowed), through its subtree
/// skipping when it has one. 1 pass, 0 fail; GIL held.
int runCheck(CheckTarget &T, PyObject *FrameLocals);

/// Frees the retired code of `T` when no call of it is in flight. GIL held.
/// (A residual target is never called through its own callable, so its
/// InFlight stays 0; its code runs no Python and so never lets another
/// thread in while it runs.)
void freeRetired(CheckTarget &T);

/// Units whose new native code disagreed with the interpreter on its first
/// call and was uninstalled (a JIT bug; the interpreter answers instead).
uint64_t distrustedCount();

/// Returns a new reference to a callable running `Target` (GIL held).
PyObject *makeNativeGuard(std::shared_ptr<CheckTarget> Target);
/// The target of a callable made by makeNativeGuard, or null.
std::shared_ptr<CheckTarget> nativeGuardTarget(PyObject *Callable);

} // namespace guardjit

#endif // GUARDJIT_PYTHON_NATIVEGUARD_H

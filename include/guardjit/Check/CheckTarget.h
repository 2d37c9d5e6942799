//===- CheckTarget.h - The life of one compile unit's check -----*- C++ -*-===//
//
// One home for a check's life, whatever calls it (the Python plugin's
// LAMBDA_GUARD callable, the embedding API's LoadedSet):
//
//   - a check target is checkable at once: the interpreter runs until native
//     code is installed (Check/TierUp.h compiles it in the background, or a
//     front door installs code it compiled itself);
//   - probation: the first call of new code also runs the interpreter, and a
//     disagreement uninstalls the code for good (Distrusted);
//   - retirement: replaced code stays alive until no call of the target is
//     in flight (freeRetired), and is freed with the target at the latest;
//   - subtree skipping (Runtime/SubtreeSkip.h): validation, then a residual
//     check that is itself a target, else the full check.
//
// Code comes from a CodeProvider (Check/CodeProvider.h); nothing here knows
// LLVM.
//
//===----------------------------------------------------------------------===//
#ifndef GUARDJIT_CHECK_CHECKTARGET_H
#define GUARDJIT_CHECK_CHECKTARGET_H

#include "guardjit/Check/CodeProvider.h"

#include "guardjit/Runtime/BoundGuardSet.h"
#include "guardjit/Runtime/Interpreter.h"
#include "guardjit/Runtime/SubtreeSkip.h"

#include <atomic>
#include <functional>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace guardjit {

struct CheckTarget;

/// Subtree skipping of one target (Runtime/SubtreeSkip.h): the plan, the
/// residual check as its own target (compiled in the background like a
/// tier-up; skipping starts once it is native, or at once when the full check
/// is interpreted too), and what turns skipping off for good. GIL held.
struct SkipState {
  std::unique_ptr<SkipPlan> Plan;
  std::shared_ptr<CheckTarget> Residual;
  /// Runs before validation when the plan has a prelude (SubtreeSkip.h).
  std::shared_ptr<CheckTarget> Prelude;
  /// Consecutive calls whose recorded state had changed / could not be
  /// recorded; at MaxMissRun the target stops skipping (a unit whose modules
  /// change on every call would pay validation and recording for nothing).
  uint32_t MissRun = 0;
  uint32_t RecordFailRun = 0;
  bool Disabled = false;
  static constexpr uint32_t MaxMissRun = 8;
};

/// What a check runs. Calls and the counters need the GIL; the background
/// tier (Check/TierUp.h) replaces the code without it: it stores Fn
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
  /// The provider level of Fn's code; -1 for the interpreter.
  std::atomic<int> Level{-1};
  /// The highest level a compile was queued at; -1 for none.
  std::atomic<int> QueuedLevel{-1};
  uint64_t Calls = 0;
  uint64_t Failures = 0;
  /// First calls of new code that also ran the interpreter. GIL held.
  uint64_t Probations = 0;

  std::mutex CodeLock; ///< guards Native and Retired
  std::shared_ptr<CheckCode> Native; ///< the code of Fn
  /// Code Fn pointed to before: a call may still be running it. Freed by the
  /// first call that ends with no other call of this target in flight
  /// (freeRetired), or with the target.
  std::vector<std::shared_ptr<CheckCode>> Retired;
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

  /// Set once, before the target is first called; null: the full check
  /// every call.
  std::unique_ptr<SkipState> Skip;

  /// Background compiles of this target queued or running, and the error of
  /// its newest failed one. Guarded by the tier-up worker's lock
  /// (Check/TierUp.h: waitTarget, targetCompileError).
  uint32_t PendingJobs = 0;
  std::string LastCompileError;
};

/// A target checking `Bound`, running `Code` when given (else the
/// interpreter). With `VerifyFirstCall` the first call of `Code` also runs
/// the interpreter, as for code the background tier installs.
std::shared_ptr<CheckTarget>
makeCheckTarget(std::shared_ptr<BoundGuardSet> Bound,
                std::shared_ptr<CheckCode> Code, bool VerifyFirstCall);

/// Publishes `Code` as the function of `T`, retiring the code it replaces;
/// with `Verify` its first call is on probation. Any thread, no GIL (the
/// background tier's swap).
void installCode(CheckTarget &T, std::shared_ptr<CheckCode> Code, bool Verify);

/// Runs the check of `T` on `FrameLocals` (borrowed), through its subtree
/// skipping when it has one. 1 pass, 0 fail; GIL held.
int runCheck(CheckTarget &T, PyObject *FrameLocals);

/// One call of `T` as a front door makes it: counted in flight, then the
/// retired code freed when no other call runs. The caller keeps `T` alive
/// for the call (a guard that calls Python may let a thread run that drops
/// the front door's reference). 1 pass, 0 fail; GIL held.
int callCheck(CheckTarget &T, PyObject *FrameLocals);

/// Frees the retired code of `T` when no call of it is in flight. GIL held.
/// (A residual target is never called through its own callable, so its
/// InFlight stays 0; its code runs no Python and so never lets another
/// thread in while it runs.)
void freeRetired(CheckTarget &T);

/// Units whose new native code disagreed with the interpreter on its first
/// call and was uninstalled (a JIT bug; the interpreter answers instead).
uint64_t distrustedCount();

/// Gives `T` sound subtree skipping planned on `FrameLocals` (borrowed;
/// frame locals its full check passes on). Returns "" when enabled (or
/// already), else why not. Call before `T` is first called; GIL held.
std::string enableSubtreeSkip(CheckTarget &T, PyObject *FrameLocals,
                              bool CostModel = true);

/// Makes (or finds) the provider of a level for the background tier; null
/// when it cannot (then nothing is queued). A front door's lookup may
/// instead throw its own exception, which passes through unchanged.
using ProviderLookup = std::function<std::shared_ptr<CodeProvider>(int Level)>;

/// Interpreter first: queues the native compile of `T` at `Level` (T still
/// runs the interpreter and nothing is queued yet) and, once that code is in
/// place, a recompile at `Then` when it is a higher level (-1: none). Each
/// new code is swapped in atomically; its first call is on probation. False
/// when nothing was queued. GIL held, or (`HoldsGil` false) any thread for a
/// target whose front door serializes these calls; returns at once.
bool startNative(std::shared_ptr<CheckTarget> T, int Level, int Then,
                 const ProviderLookup &Providers, bool HoldsGil = true);

/// Queues a recompile of `T` at `Level`; false when nothing is to gain (T
/// runs the interpreter, a mode the user chose, or code at that level or
/// above is in place or on its way) or the worker stopped. GIL held.
bool tierUp(std::shared_ptr<CheckTarget> T, int Level,
            const ProviderLookup &Providers);

/// Queues the native compile of the residual check of `T` (subtree
/// skipping) and of its prelude, if any, at `Level`; false when there is
/// none or it is already queued.
/// GIL held, or as startNative with `HoldsGil` false.
bool compileResidual(const CheckTarget &T, int Level,
                     const ProviderLookup &Providers, bool HoldsGil = true);

/// Benchmark aid: ns per call of the prelude alone, the validation alone,
/// the residual check alone and the full check; none without a valid
/// snapshot. Runs Python
/// only through the prelude's guards; GIL held.
struct SkipProfile {
  double PreludeNs = 0; ///< 0 without a prelude
  double ValidateNs = 0;
  double ResidualNs = 0;
  double FullNs = 0; ///< the full check F, for comparison
  int PreludePassed = 0;
  int Validated = 0;
  int Passed = 0;
};
std::optional<SkipProfile> profileSkip(CheckTarget &T, PyObject *FrameLocals,
                                       int Calls);

} // namespace guardjit

#endif // GUARDJIT_CHECK_CHECKTARGET_H

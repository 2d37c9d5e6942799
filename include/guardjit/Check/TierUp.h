//===- TierUp.h - Recompile hot checks off the calling thread ---*- C++ -*-===//
//
// A compile unit first runs guardjit's interpreter (CheckTarget::Fn null).
// TierUp compiles its bound set on one background thread at the first level
// (plugin.config.opt_level, `O0`: fastest to compile, slow code: LLVM's fast
// register allocator spills every value live across a block, and memo tests
// are helper calls), swaps the function into the unit's
// CheckTarget atomically, then queues a recompile at OptLevel::O1 and swaps
// again; no call waits for LLVM. (With plugin.config.first_tier = "sync" the
// first code is compiled on Dynamo's compile thread and only O1 is queued.)
// The first call of each new code also runs the interpreter (Unverified in
// Check/CheckTarget.h); replaced code is freed once no call runs it
// (Retired). The code comes from a CodeProvider (Check/CodeProvider.h).
//
// Threads and GIL:
//   - schedule() and wait() are called with the GIL held; wait() releases it
//     while it waits. (A front door with no GIL, the embedding API, uses
//     HoldsGil = false and waitTarget, and empties the graveyard with
//     drainTierUp when it holds the GIL.)
//   - The worker never touches a Python object and never takes the GIL: it
//     reads the BoundGuardSet's addresses (through the provider), compiles,
//     and stores the function pointer (release) that callCheck loads
//     (acquire).
//   - The worker's reference to a target is never the one that destroys it
//     there (BoundGuardSet's destructor drops Python references): it is
//     handed to a list that the GIL holder empties (a Py_AddPendingCall
//     callback, or the next schedule()/wait()).
//   - Replaced code stays alive as long as its target (CheckTarget::Retired):
//     a call that loaded the old pointer may still run it, even across a
//     Python call inside the check that let other threads run.
//   - Interpreter exit: an `atexit` callback stops the worker (the running
//     compile finishes, queued ones are dropped) before finalization.
//   - fork(): the child starts with no worker and an empty queue; fork waits
//     for a running compile so that the child's LLVM state is consistent.
//
//===----------------------------------------------------------------------===//
#ifndef GUARDJIT_CHECK_TIERUP_H
#define GUARDJIT_CHECK_TIERUP_H

#include "guardjit/Check/CheckTarget.h"
#include "guardjit/Check/CodeProvider.h"

#include <cstdint>
#include <memory>
#include <string>

namespace guardjit {

struct TierUpStats {
  uint64_t Scheduled = 0; ///< jobs accepted
  uint64_t Installed = 0; ///< swaps done
  uint64_t Failed = 0;    ///< compiles that failed (the unit keeps its code)
  uint64_t Dropped = 0;   ///< jobs not run: the unit died first, or exit
  uint64_t Pending = 0;   ///< queued or running now
  double CompileMs = 0;   ///< total background compile time (ms)
  std::string LastError;  ///< of the newest failure
};

/// Queues a compile of `Target` with `Provider` (its level must be above the
/// target's; the interpreter is below every level). When it is installed
/// and `Then` is a higher level, a recompile with `Then` is queued behind
/// every job queued so far. Returns false when the worker is stopped (after
/// exit began). GIL held; with `HoldsGil` false, any thread (the graveyard
/// is then left for the next GIL holder).
bool scheduleTierUp(std::shared_ptr<CheckTarget> Target,
                    std::shared_ptr<CodeProvider> Provider,
                    std::shared_ptr<CodeProvider> Then = nullptr,
                    bool HoldsGil = true);

/// Waits until no job is queued or running, or `TimeoutS` seconds pass
/// (negative: no limit). Returns true when the queue is empty. GIL held on
/// entry; released while waiting.
bool waitTierUp(double TimeoutS);

/// Waits until no job of `T` is queued or running, or `TimeoutS` seconds
/// pass (negative: no limit); true when none is left. Never takes the GIL:
/// call it without holding it.
bool waitTarget(const CheckTarget &T, double TimeoutS);

/// The error of the newest failed background compile of `T` ("" for none).
/// Any thread.
std::string targetCompileError(const CheckTarget &T);

/// Destroys the targets the worker let go of, and frees their retired code.
/// GIL held.
void drainTierUp();

TierUpStats tierUpStats();

/// Stops the worker for good (the running compile finishes first). GIL held.
void stopTierUp();

} // namespace guardjit

#endif // GUARDJIT_CHECK_TIERUP_H

//===- CheckTarget.cpp - The life of one compile unit's check -------------===//
#include "guardjit/Check/CheckTarget.h"

#include "guardjit/Check/Log.h"
#include "guardjit/Check/TierUp.h"

#include <chrono>

namespace guardjit {

namespace {

uint64_t Distrusted = 0;

/// The first call of new code: native and interpreter must agree. On a
/// disagreement the code is uninstalled for good and the interpreter's
/// answer stands (the interpreter is the reference). Either may call
/// Python; both are reads, so running both changes nothing.
int runProbation(CheckTarget &T, CheckFn Fn, PyObject *FrameLocals) {
  ++T.Probations;
  int Native = Fn(FrameLocals);
  int Reference = interpret(*T.Bound, FrameLocals);
  if (Native == Reference)
    return Native;
  if (!T.Distrusted) {
    T.Distrusted = true;
    ++Distrusted;
    if (checkLogEnabled(CheckLogLevel::Warning))
      checkLog(CheckLogLevel::Warning,
               "the first call of new native code answered " +
                   std::to_string(Native) + ", the interpreter " +
                   std::to_string(Reference) +
                   ": the unit keeps the interpreter (a JIT bug, or a "
                   "guard whose Python code changes what the guards read, "
                   "as both checks ran one after the other)");
    T.Fn.store(nullptr, std::memory_order_release);
    T.Level.store(-1);
    // The code stays alive (it may be running on another thread) until the
    // target dies: it is not retired.
  }
  return Reference;
}

/// The full check of `T`: native when compiled, else the interpreter.
int runFull(CheckTarget &T, PyObject *FrameLocals) {
  CheckFn Fn = T.Fn.load(std::memory_order_acquire);
  if (!Fn)
    return interpret(*T.Bound, FrameLocals);
  CheckFn Expected = Fn;
  if (T.Unverified.load(std::memory_order_relaxed) == Fn &&
      T.Unverified.compare_exchange_strong(Expected, nullptr))
    return runProbation(T, Fn, FrameLocals);
  return Fn(FrameLocals);
}

/// The prelude, then validation, then the residual check when every recorded
/// dict, type and pointer still holds; otherwise the full check, recording a
/// new snapshot when it passes. Neither validation, recording nor the
/// residual check runs Python code (SkipPlan::build ensures it), so no other
/// thread can change the recorded objects between validating and checking.
int runSkipping(CheckTarget &T, SkipState &K, PyObject *FrameLocals) {
  SkipPlan &P = *K.Plan;
  CheckTarget &R = *K.Residual;
  CheckFn RFn = R.Fn.load(std::memory_order_acquire);
  bool Native = T.Fn.load(std::memory_order_relaxed);
  // Interpreted parts while the full check is native would be slower.
  bool Ready = !K.Disabled && (RFn || !Native) &&
               (!K.Prelude ||
                K.Prelude->Fn.load(std::memory_order_relaxed) || !Native);
  if (Ready && P.valid()) {
    if (K.Prelude) {
      // F's guards that may run Python, before validation (SubtreeSkip.h).
      ++K.Prelude->Calls;
      if (!runFull(*K.Prelude, FrameLocals)) {
        ++K.Prelude->Failures;
        return 0;
      }
    }
    if (P.validate(FrameLocals)) {
      ++P.stats().Hits;
      K.MissRun = 0;
      ++R.Calls;
      int Ok = runFull(R, FrameLocals); // R has no skipping of its own
      R.Failures += !Ok;
      return Ok;
    }
    ++P.stats().Fallbacks;
    int Ok = runFull(T, FrameLocals);
    // A failing F is a miss of this entry (another entry's call style, say):
    // the snapshot may still describe the objects, and validation re-checks
    // all of it on every call (SubtreeSkip.h), so it stays. A passing F
    // means the state changed: record afresh.
    if (!Ok)
      return 0;
    P.invalidate();
    if (++K.MissRun >= SkipState::MaxMissRun)
      K.Disabled = true;
    if (!K.Disabled && P.record(FrameLocals))
      K.RecordFailRun = 0;
    else if (!K.Disabled && ++K.RecordFailRun >= SkipState::MaxMissRun)
      K.Disabled = true;
    return Ok;
  }
  int Ok = runFull(T, FrameLocals);
  if (Ok && !K.Disabled && !P.valid()) {
    if (P.record(FrameLocals))
      K.RecordFailRun = 0;
    else if (++K.RecordFailRun >= SkipState::MaxMissRun)
      K.Disabled = true;
  }
  return Ok;
}

} // namespace

std::shared_ptr<CheckTarget>
makeCheckTarget(std::shared_ptr<BoundGuardSet> Bound,
                std::shared_ptr<CheckCode> Code, bool VerifyFirstCall) {
  auto T = std::make_shared<CheckTarget>();
  T->Bound = std::move(Bound);
  T->Native = std::move(Code);
  if (T->Native) {
    CheckFn Fn = T->Native->function();
    T->Fn.store(Fn, std::memory_order_release);
    T->Level.store(T->Native->level());
    if (VerifyFirstCall)
      T->Unverified.store(Fn);
  }
  return T;
}

void installCode(CheckTarget &T, std::shared_ptr<CheckCode> Code, bool Verify) {
  CheckFn Fn = Code->function();
  // The first call of the new code also runs the interpreter (runFull).
  if (Verify)
    T.Unverified.store(Fn, std::memory_order_relaxed);
  std::lock_guard<std::mutex> G(T.CodeLock);
  // The code is complete before its address is published (callCheck
  // loads with acquire), and published before the old code is retired:
  // a call that sees RetiredPending (after taking CodeLock) sees the new
  // Fn, so only calls in flight can still run the old code.
  T.Fn.store(Fn, std::memory_order_release);
  T.Level.store(Code->level(), std::memory_order_relaxed);
  if (T.Native) {
    T.Retired.push_back(std::move(T.Native));
    T.RetiredPending.store(true, std::memory_order_relaxed);
  }
  T.Native = std::move(Code);
}

int runCheck(CheckTarget &T, PyObject *FrameLocals) {
  ++T.Calls;
  int Ok = T.Skip ? runSkipping(T, *T.Skip, FrameLocals)
                  : runFull(T, FrameLocals);
  if (!Ok)
    ++T.Failures;
  return Ok;
}

int callCheck(CheckTarget &T, PyObject *FrameLocals) {
  ++T.InFlight;
  int Ok = runCheck(T, FrameLocals);
  --T.InFlight;
  if (T.RetiredPending.load(std::memory_order_relaxed))
    freeRetired(T);
  return Ok;
}

void freeRetired(CheckTarget &T) {
  if (T.InFlight != 0)
    return; // the last call in flight frees it when it returns
  std::vector<std::shared_ptr<CheckCode>> Old;
  {
    std::lock_guard<std::mutex> G(T.CodeLock);
    Old.swap(T.Retired);
    T.RetiredPending.store(false, std::memory_order_relaxed);
  }
  // Destroyed here: no call of T runs (InFlight counts every one under the
  // GIL we hold), and Fn no longer points into this code.
}

uint64_t distrustedCount() { return Distrusted; }

std::string enableSubtreeSkip(CheckTarget &T, PyObject *FrameLocals,
                              bool CostModel) {
  if (T.Skip)
    return "";
  std::string WhyNot;
  std::unique_ptr<SkipPlan> Plan =
      SkipPlan::build(*T.Bound, FrameLocals, &WhyNot, CostModel);
  if (!Plan)
    return WhyNot;
  std::string Err;
  std::unique_ptr<BoundGuardSet> RB =
      BoundGuardSet::bind(Plan->residual(), &Err);
  if (!RB)
    return "cannot bind the residual set: " + Err;
  Plan->attach(*RB);
  auto K = std::make_unique<SkipState>();
  K->Residual = std::make_shared<CheckTarget>();
  K->Residual->Bound = std::move(RB);
  if (Plan->prelude()) {
    std::unique_ptr<BoundGuardSet> PB =
        BoundGuardSet::bind(Plan->prelude(), &Err);
    if (!PB)
      return "cannot bind the prelude set: " + Err;
    K->Prelude = std::make_shared<CheckTarget>();
    K->Prelude->Bound = std::move(PB);
  }
  K->Plan = std::move(Plan);
  T.Skip = std::move(K);
  return "";
}

bool startNative(std::shared_ptr<CheckTarget> T, int Level, int Then,
                 const ProviderLookup &Providers, bool HoldsGil) {
  if (T->Fn.load() || T->QueuedLevel.load() >= 0)
    return false; // native already, or on its way
  std::shared_ptr<CodeProvider> First = Providers(Level);
  if (!First)
    return false;
  // No provider for the tier-up level: the first code only.
  std::shared_ptr<CodeProvider> Next = Then > Level ? Providers(Then) : nullptr;
  // Stored once both lookups are done, so a failed lookup leaves the target
  // free to be queued again. The GIL (or the front door) serializes callers.
  T->QueuedLevel.store(Next ? Then : Level);
  return scheduleTierUp(std::move(T), std::move(First), std::move(Next),
                        HoldsGil);
}

bool tierUp(std::shared_ptr<CheckTarget> T, int Level,
            const ProviderLookup &Providers) {
  // Nothing to gain: the interpreter stays (a mode the user chose), and
  // code at this level or above stays, or is already on its way.
  if (!T->Fn.load() || T->Level.load() >= Level ||
      T->QueuedLevel.load() >= Level)
    return false;
  T->QueuedLevel.store(Level); // the GIL serializes callers
  std::shared_ptr<CodeProvider> P = Providers(Level);
  if (!P)
    return false;
  return scheduleTierUp(std::move(T), std::move(P));
}

bool compileResidual(const CheckTarget &T, int Level,
                     const ProviderLookup &Providers, bool HoldsGil) {
  if (!T.Skip || T.Skip->Residual->QueuedLevel.load() >= 0)
    return false;
  T.Skip->Residual->QueuedLevel.store(Level);
  std::shared_ptr<CodeProvider> P = Providers(Level);
  if (!P)
    return false;
  if (const auto &Pre = T.Skip->Prelude) {
    Pre->QueuedLevel.store(Level);
    if (!scheduleTierUp(Pre, P, nullptr, HoldsGil))
      return false;
  }
  return scheduleTierUp(T.Skip->Residual, std::move(P), nullptr, HoldsGil);
}

std::optional<SkipProfile> profileSkip(CheckTarget &T, PyObject *FrameLocals,
                                       int Calls) {
  if (!T.Skip || !T.Skip->Plan->valid())
    return std::nullopt;
  SkipPlan &P = *T.Skip->Plan;
  CheckTarget &R = *T.Skip->Residual;
  CheckFn RFn = R.Fn.load(std::memory_order_acquire);
  using Clock = std::chrono::steady_clock;
  auto Start = Clock::now();
  int PreludePass = 0;
  if (const auto &Pre = T.Skip->Prelude) {
    CheckFn PFn = Pre->Fn.load(std::memory_order_acquire);
    for (int I = 0; I < Calls; ++I)
      PreludePass += PFn ? PFn(FrameLocals) : interpret(*Pre->Bound, FrameLocals);
  }
  auto PreEnd = Clock::now();
  int Valid = 0;
  for (int I = 0; I < Calls; ++I)
    Valid += P.validate(FrameLocals);
  auto Mid = Clock::now();
  int Pass = 0;
  // R reads the recorded table, which only a passing validation vouches for
  // (a kept snapshot may hold objects freed since).
  if (Valid == Calls)
    for (int I = 0; I < Calls; ++I)
      Pass += RFn ? RFn(FrameLocals) : interpret(*R.Bound, FrameLocals);
  auto End = Clock::now();
  CheckFn FFn = T.Fn.load(std::memory_order_acquire);
  for (int I = 0; I < Calls; ++I)
    FFn ? FFn(FrameLocals) : interpret(*T.Bound, FrameLocals);
  auto FullEnd = Clock::now();
  auto Ns = [&](auto A, auto B) {
    return std::chrono::duration<double, std::nano>(B - A).count() / Calls;
  };
  SkipProfile Out;
  Out.PreludeNs = Ns(Start, PreEnd);
  Out.ValidateNs = Ns(PreEnd, Mid);
  Out.ResidualNs = Ns(Mid, End);
  Out.FullNs = Ns(End, FullEnd);
  Out.Validated = Valid;
  Out.Passed = Pass;
  Out.PreludePassed = T.Skip->Prelude ? PreludePass : Calls;
  return Out;
}

} // namespace guardjit

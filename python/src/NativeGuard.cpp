//===- NativeGuard.cpp - The callable Dynamo's root guard invokes ---------===//
#include "NativeGuard.h"

#include "Logging.h"

#include "guardjit/JIT/Engine.h"

namespace guardjit {
namespace {

// The PyCFunction's self: a minimal object owning the target.
struct HolderObject {
  PyObject_HEAD std::shared_ptr<CheckTarget> *Target;
};

void holderDealloc(PyObject *Self) {
  auto *H = reinterpret_cast<HolderObject *>(Self);
  delete H->Target;
  H->Target = nullptr;
  PyTypeObject *Tp = Py_TYPE(Self);
  Tp->tp_free(Self);
  Py_DECREF(Tp);
}

PyType_Slot HolderSlots[] = {{Py_tp_dealloc, (void *)holderDealloc},
                             {0, nullptr}};
PyType_Spec HolderSpec = {"guardjit._core.CheckTargetHolder",
                          sizeof(HolderObject), 0, Py_TPFLAGS_DEFAULT,
                          HolderSlots};
PyTypeObject *HolderType = nullptr;

// METH_O: Dynamo's LAMBDA_GUARD calls this with the frame locals dict and
// treats a true result as a pass.
// The holder is kept alive for the call (one non-atomic increment, under the
// GIL): a guard that calls Python may let another thread run, and if that
// thread drops the last reference to the root (torch._dynamo.reset(), an
// eviction), the target, its bound set and the code running now must
// outlive this call; they go with the final Py_DECREF, after it returned.
PyObject *callCheck(PyObject *Self, PyObject *FrameLocals) {
  Py_INCREF(Self);
  CheckTarget &T = **reinterpret_cast<HolderObject *>(Self)->Target;
  ++T.InFlight;
  int Ok = runCheck(T, FrameLocals);
  --T.InFlight;
  if (T.RetiredPending.load(std::memory_order_relaxed))
    freeRetired(T);
  Py_DECREF(Self);
  return Py_NewRef(Ok ? Py_True : Py_False);
}

PyMethodDef CheckDef = {"guardjit_check", callCheck, METH_O,
                        "guardjit's check of one compile unit's guards."};

uint64_t Distrusted = 0;

/// The first call of new code: native and interpreter must agree. On a
/// disagreement the code is uninstalled for good and the interpreter's
/// answer stands (the interpreter is the reference). Either may call
/// Python; both are reads, so running both changes nothing.
int runProbation(CheckTarget &T, CheckFn Fn, PyObject *FrameLocals) {
  int Native = Fn(FrameLocals);
  int Reference = interpret(*T.Bound, FrameLocals);
  if (Native == Reference)
    return Native;
  if (!T.Distrusted) {
    T.Distrusted = true;
    ++Distrusted;
    if (logEnabled(LogLevel::Warning))
      logMessage(LogLevel::Warning,
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

/// Validation, then the residual check when every recorded dict, type and
/// pointer still holds; otherwise the full check, recording a new snapshot
/// when it passes. Neither validation, recording nor the residual check runs
/// Python code (SkipPlan::build ensures it), so no other thread can change
/// the recorded objects between validating and checking.
int runSkipping(CheckTarget &T, SkipState &K, PyObject *FrameLocals) {
  SkipPlan &P = *K.Plan;
  CheckTarget &R = *K.Residual;
  CheckFn RFn = R.Fn.load(std::memory_order_acquire);
  bool Ready = !K.Disabled &&
               (RFn || !T.Fn.load(std::memory_order_relaxed));
  if (Ready && P.valid()) {
    if (P.validate(FrameLocals)) {
      ++P.stats().Hits;
      K.MissRun = 0;
      ++R.Calls;
      int Ok = runFull(R, FrameLocals); // R has no skipping of its own
      R.Failures += !Ok;
      return Ok;
    }
    ++P.stats().Fallbacks;
    P.invalidate();
    if (++K.MissRun >= SkipState::MaxMissRun)
      K.Disabled = true;
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

int runCheck(CheckTarget &T, PyObject *FrameLocals) {
  ++T.Calls;
  int Ok = T.Skip ? runSkipping(T, *T.Skip, FrameLocals)
                  : runFull(T, FrameLocals);
  if (!Ok)
    ++T.Failures;
  return Ok;
}

void freeRetired(CheckTarget &T) {
  if (T.InFlight != 0)
    return; // the last call in flight frees it when it returns
  std::vector<std::shared_ptr<CompiledCheck>> Old;
  {
    std::lock_guard<std::mutex> G(T.CodeLock);
    Old.swap(T.Retired);
    T.RetiredPending.store(false, std::memory_order_relaxed);
  }
  // Destroyed here: no call of T runs (InFlight counts every one under the
  // GIL we hold), and Fn no longer points into this code.
}

uint64_t distrustedCount() { return Distrusted; }

PyObject *makeNativeGuard(std::shared_ptr<CheckTarget> Target) {
  if (!HolderType) {
    HolderType = reinterpret_cast<PyTypeObject *>(PyType_FromSpec(&HolderSpec));
    if (!HolderType)
      return nullptr;
  }
  auto *H = PyObject_New(HolderObject, HolderType);
  if (!H)
    return nullptr;
  H->Target = new std::shared_ptr<CheckTarget>(std::move(Target));
  PyObject *Fn = PyCFunction_New(&CheckDef, reinterpret_cast<PyObject *>(H));
  Py_DECREF(H);
  return Fn;
}

std::shared_ptr<CheckTarget> nativeGuardTarget(PyObject *Callable) {
  if (!PyCFunction_Check(Callable) ||
      PyCFunction_GET_FUNCTION(Callable) != callCheck)
    return nullptr;
  PyObject *Self = PyCFunction_GET_SELF(Callable);
  return *reinterpret_cast<HolderObject *>(Self)->Target;
}

} // namespace guardjit

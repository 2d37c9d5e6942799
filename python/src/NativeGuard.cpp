//===- NativeGuard.cpp - The callable Dynamo's root guard invokes ---------===//
#include "NativeGuard.h"

#include <ATen/record_function.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <optional>
#include <string>
#include <unordered_map>

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

// The check inside a torch.profiler event (torch's RecordFunction, the kind
// of event Dynamo's "TorchDynamo Cache Lookup" is, so it nests under it): the
// "guardjit check" event, with the unit, its tier, guard count and skip
// counters as keyword inputs when the profiler records inputs
// (record_shapes), then, for a unit with subtree skipping, a marker event
// "guardjit skip hit" or "guardjit skip fallback" nested in it, so
// key_averages() counts each outcome. Only runs when a callback is on.
int callRecorded(CheckTarget &T, PyObject *FrameLocals, at::StepCallbacks Step) {
  at::RecordFunction Event(std::move(Step));
  SkipStats *Stats = T.Skip ? &T.Skip->Plan->stats() : nullptr;
  uint64_t Hits = Stats ? Stats->Hits : 0;
  uint64_t Fallbacks = Stats ? Stats->Fallbacks : 0;
  if (Event.isActive()) {
    if (Event.needsInputs()) {
      const GuardSet &Set = T.Bound->set();
      std::unordered_map<std::string, c10::IValue> Kw{
          {"unit", c10::IValue(Set.name())},
          {"tier", c10::IValue(T.Fn.load(std::memory_order_relaxed)
                                   ? "native"
                                   : "interpreter")},
          {"guards", c10::IValue(static_cast<int64_t>(Set.guards().size()))}};
      if (Stats) {
        Kw.emplace("skip_hits", c10::IValue(static_cast<int64_t>(Hits)));
        Kw.emplace("skip_fallbacks",
                   c10::IValue(static_cast<int64_t>(Fallbacks)));
      }
      Event.before("guardjit check", &Kw);
    } else {
      Event.before("guardjit check");
    }
  }
  int Ok = callCheck(T, FrameLocals);
  if (Stats && (Stats->Hits != Hits || Stats->Fallbacks != Fallbacks)) {
    at::RecordFunction Mark(at::RecordScope::FUNCTION);
    if (Mark.isActive())
      Mark.before(Stats->Hits != Hits ? "guardjit skip hit"
                                      : "guardjit skip fallback");
  }
  return Ok;
}

std::atomic<bool> ProfilerEvents{true};

/// One call as Dynamo's lookup makes it: profiled only when a profiler (any
/// RecordFunction callback) is on; otherwise the cost is torch's
/// thread-local test of its callbacks (~9 ns: a call into libtorch_cpu and
/// its TLS), skipped too when the events are off.
int callMaybeRecorded(CheckTarget &T, PyObject *FrameLocals) {
  if (ProfilerEvents.load(std::memory_order_relaxed)) [[likely]] {
    if (std::optional<at::StepCallbacks> Step =
            at::getStepCallbacksUnlessEmpty(at::RecordScope::FUNCTION))
        [[unlikely]]
      return callRecorded(T, FrameLocals, std::move(*Step));
  }
  return callCheck(T, FrameLocals);
}

// METH_O: Dynamo's LAMBDA_GUARD calls this with the frame locals dict and
// treats a true result as a pass.
// The holder is kept alive for the call (one non-atomic increment, under the
// GIL): a guard that calls Python may let another thread run, and if that
// thread drops the last reference to the root (torch._dynamo.reset(), an
// eviction), the target, its bound set and the code running now must
// outlive this call; they go with the final Py_DECREF, after it returned.
PyObject *callGuard(PyObject *Self, PyObject *FrameLocals) {
  Py_INCREF(Self);
  int Ok = callMaybeRecorded(
      **reinterpret_cast<HolderObject *>(Self)->Target, FrameLocals);
  Py_DECREF(Self);
  return Py_NewRef(Ok ? Py_True : Py_False);
}

PyMethodDef CheckDef = {"guardjit_check", callGuard, METH_O,
                        "guardjit's check of one compile unit's guards."};

} // namespace

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
      PyCFunction_GET_FUNCTION(Callable) != callGuard)
    return nullptr;
  PyObject *Self = PyCFunction_GET_SELF(Callable);
  return *reinterpret_cast<HolderObject *>(Self)->Target;
}

bool setProfilerEvents(bool On) {
  return ProfilerEvents.exchange(On, std::memory_order_relaxed);
}

double timeGuardCalls(CheckTarget &T, PyObject *FrameLocals, int Calls,
                      bool Recorded) {
  // Both loops stay in this file, so each call is the code the callable
  // runs (callMaybeRecorded) or the same call without the profiler test.
  auto Start = std::chrono::steady_clock::now();
  if (Recorded)
    for (int I = 0; I < Calls; ++I)
      callMaybeRecorded(T, FrameLocals);
  else
    for (int I = 0; I < Calls; ++I)
      callCheck(T, FrameLocals);
  std::chrono::duration<double, std::nano> Ns =
      std::chrono::steady_clock::now() - Start;
  return Ns.count() / std::max(Calls, 1);
}

} // namespace guardjit

//===- NativeGuard.h - The callable Dynamo's root guard invokes -*- C++ -*-===//
//
// A C-level callable `f(f_locals) -> bool` (a PyCFunction with METH_O) that
// runs one compile unit's check target (Check/CheckTarget.h: the native
// function when compiled, the interpreter otherwise). It is installed as the
// only leaf guard of a fresh RootGuardManager (a LAMBDA_GUARD), so Dynamo's
// cache lookup calls it with the frame locals dict. When a torch.profiler
// runs, each call is a "guardjit check" event (torch's RecordFunction)
// nested in Dynamo's "TorchDynamo Cache Lookup"; otherwise the only cost is
// torch's test for profiler callbacks. The binding of a target only: its
// life is lib/Check's.
//
//===----------------------------------------------------------------------===//
#ifndef GUARDJIT_PYTHON_NATIVEGUARD_H
#define GUARDJIT_PYTHON_NATIVEGUARD_H

#include "guardjit/Check/CheckTarget.h"

#include <memory>

namespace guardjit {

/// Returns a new reference to a callable running `Target` (GIL held).
PyObject *makeNativeGuard(std::shared_ptr<CheckTarget> Target);
/// The target of a callable made by makeNativeGuard, or null.
std::shared_ptr<CheckTarget> nativeGuardTarget(PyObject *Callable);
/// Turns the torch.profiler events of every callable on (the default) or
/// off; returns the previous setting. Off, a call does not even test for a
/// profiler (benchmarks of Dynamo's lookup event, whose self time would
/// otherwise lose guardjit's check to its child event). Any thread.
bool setProfilerEvents(bool On);
/// Benchmark aid: ns per call of `Calls` calls of `T` on `FrameLocals`
/// (borrowed), as the callable makes them (`Recorded`: with the
/// torch.profiler event when a profiler runs, and torch's test for one when
/// none does) or callCheck alone. GIL held; runs what the check runs.
double timeGuardCalls(CheckTarget &T, PyObject *FrameLocals, int Calls,
                      bool Recorded);

} // namespace guardjit

#endif // GUARDJIT_PYTHON_NATIVEGUARD_H

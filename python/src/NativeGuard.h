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

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace guardjit {
class CompiledCheck;

/// What a NativeGuard callable runs. Calls and the counters need the GIL;
/// the background tier (TierUp.h) replaces the code without it: it stores Fn
/// (release) after Native under CodeLock, so a call loads Fn (acquire) once
/// and runs code that stays alive as long as this target.
struct CheckTarget {
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
  /// Code Fn pointed to before: a call may still be running it.
  std::vector<std::shared_ptr<CompiledCheck>> Retired;
};

/// Returns a new reference to a callable running `Target` (GIL held).
PyObject *makeNativeGuard(std::shared_ptr<CheckTarget> Target);
/// The target of a callable made by makeNativeGuard, or null.
std::shared_ptr<CheckTarget> nativeGuardTarget(PyObject *Callable);

} // namespace guardjit

#endif // GUARDJIT_PYTHON_NATIVEGUARD_H

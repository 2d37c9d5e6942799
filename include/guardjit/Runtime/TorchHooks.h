//===- TorchHooks.h - Torch-specific checks behind a C table ----*- C++ -*-===//
//
// The Runtime layer is plain CPython: it knows nothing of ATen. Guards that
// read ATen state (TENSOR_MATCH, GLOBAL_STATE, TORCH_FUNCTION_MODE_STACK, the
// saved-tensors hooks, COW_TENSOR_MATCH) go
// through this table, filled in by the TorchRuntime component (built against
// the installed torch's headers) when the Python module loads. Tests may
// install their own table.
//
// Every function is called with the GIL held and never raises: a failed read
// is a failed check (error cleared), as in torch/csrc/dynamo/guards.cpp.
//
//===----------------------------------------------------------------------===//
#ifndef GUARDJIT_RUNTIME_TORCHHOOKS_H
#define GUARDJIT_RUNTIME_TORCHHOOKS_H

#include "guardjit/Runtime/Python.h"

#include <cstddef>
#include <cstdint>
#include <string>

namespace guardjit {

class GuardSet;
struct Guard;

/// The thread-local dispatch key modifiers, read once per check
/// (torch::dynamo::LocalState): apply(ks) = (ks | Included) & ~Excluded.
struct LocalState {
  uint64_t Included = 0;
  uint64_t Excluded = 0;
};

/// Guard payload preparation: turns a guard's IR parameters (and its bound
/// objects) into the native form the check function reads. Returns nullptr
/// and sets *Error when the guard cannot be prepared.
using PrepareFn = void *(*)(const GuardSet &Set, const Guard &G,
                            PyObject *const *Objects, std::string *Error);
using ReleaseFn = void (*)(const Guard &G, void *Payload);

struct TorchHooks {
  /// Fills *State from c10::impl::tls_local_dispatch_key_set().
  void (*readLocalState)(LocalState *State);
  /// TENSOR_MATCH: 1 iff `Value` (borrowed) matches the prepared spec.
  int (*tensorMatch)(PyObject *Value, const void *Payload,
                     const LocalState *State);
  /// GLOBAL_STATE: 1 iff the ambient global state equals the prepared one.
  int (*globalState)(const void *Payload);
  /// TORCH_FUNCTION_MODE_STACK: 1 iff the TLS mode stack has the types.
  int (*torchFunctionModeStack)(const void *Payload);
  PrepareFn prepare;
  ReleaseFn release;
  /// GradGuardAccessor: for a tensor (subclasses too) a new reference to
  /// THPVariable_Wrap(THPVariable_Unpack(Value).grad()) (None when the grad
  /// is undefined); NULL for a non-tensor. Reads the C++ field, so no
  /// __torch_function__ or Python property runs. Optional (NULL: reads fail).
  PyObject *(*tensorGrad)(PyObject *Value);
  /// STORAGE_OVERLAPPING: 1 iff torch's check_overlapping(first
  /// `NumOverlapping` tensors, the rest) holds for the N borrowed objects;
  /// 0 if any is not a tensor. Optional (NULL: the guard fails).
  int (*storageOverlapping)(PyObject *const *Tensors, size_t N,
                            size_t NumOverlapping);
  /// TensorPropertyGuardAccessor: for a tensor `Value` (THPVariable_Check),
  /// stores size(Index) (Property 0), stride(Index) (1) or storage_offset()
  /// (2) in *Out and returns 1; returns 0 for a non-tensor, Index outside
  /// [0, dim) or a symbolic value (maybe_as_int() empty). May be null.
  int (*tensorProperty)(PyObject *Value, int Property, int64_t Index,
                        int64_t *Out);
  /// AUTOGRAD_SAVED_TENSORS_HOOKS (Guards.def): 1 iff the top of this
  /// thread's saved-tensors default hooks, read as Dynamo's lambda reads it,
  /// is "no inlineable hooks" (`HasIds` 0) or the inlineable pair whose
  /// addresses are `PackId`, `UnpackId` (`HasIds` 1). `GraphModule`
  /// (borrowed) is torch.fx.GraphModule. May run Python (an isinstance on a
  /// hook with a custom __class__); returns 0 with any error cleared when
  /// the lambda would raise. May be null (the guard fails).
  int (*savedTensorsHooks)(PyObject *GraphModule, int HasIds, int64_t PackId,
                           int64_t UnpackId);
  /// COW_TENSOR_MATCH (Guards.def): 1 iff `Value` (borrowed) is a
  /// torch.Tensor (isinstance, as THPVariable_Check) without the Python
  /// dispatch key whose storage's data pointer is copy-on-write exactly when
  /// `Expected` is 1. May run Python (isinstance reads a non-tensor's
  /// `__class__`); returns 0 with any error cleared where torch's lambda
  /// raises. May be null (the guard fails).
  int (*cowTensorMatch)(PyObject *Value, int Expected);
};

/// Installs the table (not owned; must outlive every bound guard set).
void setTorchHooks(const TorchHooks *Hooks);
/// The installed table, or nullptr.
const TorchHooks *torchHooks();

} // namespace guardjit

#endif // GUARDJIT_RUNTIME_TORCHHOOKS_H

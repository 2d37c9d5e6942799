//===- TorchRuntime.h - TorchHooks implemented against ATen -----*- C++ -*-===//
//
// Implements the TorchHooks table (TENSOR_MATCH, GLOBAL_STATE,
// TORCH_FUNCTION_MODE_STACK, the TLS dispatch key state, the saved-tensors
// hooks and COW_TENSOR_MATCH lambdas, ...) with the C++ API of
// the torch this component was compiled against (torch 2.13.0), mirroring
// torch::dynamo::TensorCheck and GlobalStateGuard in
// torch/csrc/dynamo/guards.cpp.
//
// What each guard needs in the IR (prepared once by BoundGuardSet::bind):
//  - TENSOR_MATCH: Guard.Tensor indexes a TensorSpec. Spec.PyType is the
//    exact type (a torch.Tensor subclass object in the table); Sizes and
//    Strides have the same length (nullopt = dynamic; Dynamo's "empty list
//    means the example tensor's own shape" must be expanded by the recorder);
//    DispatchKeys is LocalState.apply(torch._C._dispatch_keys(x)).raw_repr()
//    taken when Dynamo builds the guard (see LocalState in TorchHooks.h).
//  - GLOBAL_STATE: Guard.Str is GlobalStateGuard.__getstate__() (JSON); every
//    field of it is compared.
//  - TORCH_FUNCTION_MODE_STACK: Guard.Object is a tuple (or list) of the
//    expected mode *types*, bottom of the stack first: tuple(type(m) for m in
//    initial_stack). Bind it Strong (the tuple is usually a temporary).
//
// LocalState note: Dynamo masks the Python dispatch keys unless a thread-local
// flag set by TorchDispatchMode.__enter__ is true; that TLS is not exported by
// libtorch_python, so readLocalState reads its source,
// torch.utils._python_dispatch._is_in_any_mode_without_ignore_compile_internals.
//
//===----------------------------------------------------------------------===//
#ifndef GUARDJIT_TORCHRUNTIME_TORCHRUNTIME_H
#define GUARDJIT_TORCHRUNTIME_TORCHRUNTIME_H

namespace guardjit {

/// Installs the ATen-backed TorchHooks. Call once, with the GIL held, after
/// `import torch` (the torch libraries must be loaded). Idempotent.
void installTorchRuntime();

/// "verified" when the JIT may read TENSOR_MATCH's TensorImpl fields inline,
/// else the first field whose offset disagreed with torch on a probe tensor
/// (TENSOR_MATCH then calls the helper). Call after installTorchRuntime().
const char *tensorLayoutStatus();

/// Mirrors torch's thread-local set by
/// torch._C._dynamo.guards.set_is_in_mode_without_ignore_compile_internals
/// (not exported by libtorch_python) for the calling thread. While it is
/// false (the default) LocalState masks the Python dispatch keys.
void setInModeWithoutIgnoreCompileInternals(bool InMode);
/// Whether LocalState on the calling thread masks the Python keys.
bool masksPythonKeys();

} // namespace guardjit

#endif // GUARDJIT_TORCHRUNTIME_TORCHRUNTIME_H

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

/// Where generated code finds the fields TENSOR_MATCH compares, so lib/JIT
/// can read them inline instead of calling TorchHooks::tensorMatch. The
/// Runtime and JIT layers have no torch headers: lib/TorchRuntime takes each
/// offset from torch's headers (member pointers, lib/TorchRuntime/
/// TensorLayout.cpp) and checks it at install time against torch's own
/// accessors on real tensors. The JIT inlines only when `Verified` is 1 and
/// sends every tensor outside the verified region (any bit of HelperKeys or
/// PolicyMask set, no device, an autograd meta of another class) to the
/// helper, which stays the reference. All offsets are in bytes.
struct TensorLayout {
  /// 1 iff every offset below agreed with torch on every probe tensor.
  int Verified = 0;
  /// THPVariable -> its TensorImpl* (THPVariable::cdata's intrusive_ptr).
  int32_t Impl = 0;
  /// TensorImpl fields: key_set_ (uint64_t raw DispatchKeySet), data_type_
  /// (uint16_t TypeMeta index, equal to the ScalarType below
  /// NumScalarTypes), device_opt_'s Device index (int8_t) and its
  /// std::optional engaged flag (uint8_t 1).
  int32_t KeySet = 0;
  int32_t DType = 0;
  int32_t DeviceIndex = 0;
  int32_t DeviceEngaged = 0;
  /// The byte of TensorImpl's bit-fields holding sizes_strides_policy_,
  /// has_symbolic_sizes_strides_ and device_policy_; the inline path
  /// requires (byte & PolicyMask) == 0 (default sizes, strides and device).
  /// LayoutPolicy / LayoutPolicyMask: layout_policy_ likewise.
  int32_t Policy = 0;
  uint8_t PolicyMask = 0;
  int32_t LayoutPolicy = 0;
  uint8_t LayoutPolicyMask = 0;
  /// TensorImpl::sizes_and_strides_: its size_ (uint64_t), then its storage:
  /// up to InlineDims dims, sizes at +8 and strides at +8 + 8 * InlineDims;
  /// beyond, a heap pointer at +8 to sizes then strides.
  int32_t SizesAndStrides = 0;
  int32_t InlineDims = 0;
  /// TensorImpl::autograd_meta_ (null: requires_grad() is false), the vtable
  /// pointer of a plain torch::autograd::AutogradMeta and its requires_grad_
  /// (bool) and grad_fn_ (pointer) fields. A DifferentiableViewMeta (vtable
  /// ViewMetaVTable) adds `has_bw_view() && base_.requires_grad()`: its
  /// backward_info_ engaged flag (uint8_t) and that ViewInfo's base_
  /// (TensorImpl*) are at ViewEngaged and ViewBase in the meta. Any other
  /// class goes to the helper.
  int32_t AutogradMeta = 0;
  uint64_t AutogradMetaVTable = 0;
  int32_t RequiresGrad = 0;
  int32_t GradFn = 0;
  uint64_t ViewMetaVTable = 0;
  int32_t ViewEngaged = 0;
  int32_t ViewBase = 0;
  /// Raw dispatch keys that send the check to the helper (Python, sparse,
  /// nested, functorch, functionalization).
  uint64_t HelperKeys = 0;
  /// Where TENSOR_MATCH's prepared payload holds AutogradMetaVTable and
  /// ViewMetaVTable (process addresses that compiled code must not embed).
  static constexpr int32_t PayloadAutogradMetaVTable = 32;
  static constexpr int32_t PayloadViewMetaVTable = 40;
  /// A TypeMeta index below this is the ScalarType of the same number.
  int32_t NumScalarTypes = 0;
  /// "verified", or the first mismatch (for stats and logs).
  const char *Status = "not checked";
};

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
  /// The TensorImpl layout for inline TENSOR_MATCH (lib/JIT). May be null
  /// (the JIT then calls tensorMatch); read only when Verified is 1.
  const TensorLayout *tensorLayout;
};

/// Installs the table (not owned; must outlive every bound guard set).
void setTorchHooks(const TorchHooks *Hooks);
/// The installed table, or nullptr.
const TorchHooks *torchHooks();

} // namespace guardjit

#endif // GUARDJIT_RUNTIME_TORCHHOOKS_H

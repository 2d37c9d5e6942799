//===- TorchRuntime.cpp - TorchHooks implemented against ATen -------------===//
//
// The ATen-backed TorchHooks table. Each check mirrors torch 2.13's
// torch/csrc/dynamo/guards.cpp (TensorCheck::check, GlobalStateGuard::check,
// TORCH_FUNCTION_MODE_STACK), torch/csrc/dynamo/guards.h (LocalState) and
// the AUTOGRAD_SAVED_TENSORS_HOOKS and (torch 2.14) COW_TENSOR_MATCH lambdas
// of torch/_dynamo/guards.py; docs/guard-semantics.md §5–§6, §12 and §15
// record the experiments behind them.
//
// No exception leaves this file: every ATen call that can throw is inside a
// try block whose failure is a failed check (or a failed prepare).
//
//===----------------------------------------------------------------------===//
#include "guardjit/TorchRuntime/TorchRuntime.h"

// First, so CPython is configured our way (PY_SSIZE_T_CLEAN) before the
// torch headers include it.
#include "guardjit/Runtime/Python.h"

#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <ATen/PythonTorchFunctionTLS.h>
#include <ATen/SavedTensorHooks.h>
#include <ATen/autocast_mode.h>
#include <c10/core/DefaultDtype.h>
#include <c10/core/GradMode.h>
#include <c10/core/SafePyObject.h>
#include <c10/core/impl/COW.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/csrc/PyInterpreter.h>
#include <torch/csrc/autograd/python_variable.h>

#include "TensorLayout.h"
#include "guardjit/IR/GuardSet.h"
#include "guardjit/Runtime/TorchHooks.h"

#include <array>
#include <cstddef>
#include <new>
#include <optional>
#include <string>
#include <vector>

using namespace guardjit;

namespace {

//===----------------------------------------------------------------------===//
// LocalState
//===----------------------------------------------------------------------===//

/// `torch.utils._python_dispatch.__dict__` and the interned name of its
/// `_is_in_any_mode_without_ignore_compile_internals` flag. Dynamo reads a
/// thread_local copy of that flag that libtorch_python does not export; the
/// Python global is what every TorchDispatchMode.__enter__/__exit__ writes it
/// from, so it is equal to the TLS on the thread that entered the mode.
// Mirror of torch's hidden thread-local "in a dispatch mode without
// ignore_compile_internals" flag (LocalState::should_mask_python_keys reads
// its negation). torch sets it through
// torch._C._dynamo.guards.set_is_in_mode_without_ignore_compile_internals,
// which the plugin wraps to call setInModeWithoutIgnoreCompileInternals too.
// The default, false, is torch's.
thread_local bool InModeWithoutIgnoreCompileInternals = false;

bool shouldMaskPythonKeys() { return !InModeWithoutIgnoreCompileInternals; }

/// torch::dynamo::LocalState::apply(ks) is
///   ((ks | included) - excluded) - {Python, PythonTLSSnapshot,
///                                    PythonDispatcher}   [if masking]
/// where DispatchKeySet's `-` removes functionality bits only and keeps the
/// backend bits. Both subtractions are folded into one mask, so the check is
/// apply(ks) = (ks | Included) & ~Excluded as TorchHooks.h states.
void readLocalState(LocalState *State) {
  c10::impl::LocalDispatchKeySet Local = c10::impl::tls_local_dispatch_key_set();
  c10::DispatchKeySet Keep =
      c10::DispatchKeySet(c10::DispatchKeySet::RAW, ~uint64_t(0)) -
      Local.excluded_;
  if (shouldMaskPythonKeys())
    Keep = Keep - c10::DispatchKeySet({c10::DispatchKey::Python,
                                       c10::DispatchKey::PythonTLSSnapshot,
                                       c10::DispatchKey::PythonDispatcher});
  State->Included = Local.included_.raw_repr();
  State->Excluded = ~Keep.raw_repr();
}

//===----------------------------------------------------------------------===//
// TENSOR_MATCH
//===----------------------------------------------------------------------===//

/// One allocation per guard, 64-byte aligned and read front to back, so a
/// cold TENSOR_MATCH touches one payload line for tensors of up to 2 dims
/// (two up to 6): the header, then per dim the expected size and stride
/// (dims()[2*I], dims()[2*I+1]). A dim Dynamo leaves dynamic (nullopt in the
/// TensorSpec) has its bit set in DynamicSizes / DynamicStrides and is not
/// compared; hence at most MaxDims dims (prepare rejects more, and the unit
/// stays on Dynamo's path).
struct alignas(64) TensorPayload {
  static constexpr unsigned MaxDims = 32;
  PyTypeObject *PyType; ///< borrowed from the bound object table
  uint64_t DispatchKeys;
  c10::ScalarType DType;
  c10::DeviceIndex DeviceIndex;
  bool RequiresGrad;
  uint8_t NDim;
  uint32_t DynamicSizes;
  uint32_t DynamicStrides;
  /// TensorLayout::AutogradMetaVTable and ViewMetaVTable, for the inline
  /// check (lib/JIT): process addresses, so they live in the bound payload
  /// and not in code that the object cache may reuse in another process.
  uint64_t AutogradMetaVTable;
  uint64_t ViewMetaVTable;
  int64_t *dims() { return reinterpret_cast<int64_t *>(this + 1); }
  const int64_t *dims() const {
    return reinterpret_cast<const int64_t *>(this + 1);
  }
};
static_assert(sizeof(TensorPayload) == 64 && alignof(TensorPayload) == 64,
              "the header is one line; dims follow it");
static_assert(offsetof(TensorPayload, AutogradMetaVTable) ==
                  TensorLayout::PayloadAutogradMetaVTable,
              "TensorLayout tells the JIT where the vtable is");
static_assert(offsetof(TensorPayload, ViewMetaVTable) ==
                  TensorLayout::PayloadViewMetaVTable,
              "TensorLayout tells the JIT where the view vtable is");

/// Dynamo compares SymInt != SymInt; for concrete sizes that is an integer
/// compare, and the SymInt path is kept for symbolic ones.
inline bool symIntDiffers(const c10::SymInt &Actual, int64_t Expected) {
  if (std::optional<int64_t> A = Actual.maybe_as_int())
    return *A != Expected;
  return Actual != c10::SymInt(Expected);
}

int tensorMatch(PyObject *Value, const void *Payload, const LocalState *State) {
  const auto &P = *static_cast<const TensorPayload *>(Payload);
  // Exact Python type (Parameter differs from Tensor); this also proves
  // `Value` is a THPVariable, since prepare() checked that PyType is one.
  if (Py_TYPE(Value) != P.PyType)
    return 0;
  try {
    // One TensorImpl for every field below (TensorCheck::check reads the
    // same fields of the same tensor).
    const at::Tensor &T = THPVariable_Unpack(Value);
    uint64_t Keys =
        (T.key_set().raw_repr() | State->Included) & ~State->Excluded;
    if (Keys != P.DispatchKeys || T.scalar_type() != P.DType ||
        T.device().index() != P.DeviceIndex ||
        T.requires_grad() != P.RequiresGrad)
      return 0;
    c10::SymIntArrayRef Sizes = T.sym_sizes();
    if (Sizes.size() != P.NDim)
      return 0;
    // TensorCheck::check: sparse compressed layouts have no strides and are
    // compared against a vector of -1.
    c10::Layout L = T.layout();
    bool NoStrides = L == c10::kSparseCsr || L == c10::kSparseCsc ||
                     L == c10::kSparseBsc || L == c10::kSparseBsr;
    c10::SymIntArrayRef Strides;
    if (!NoStrides)
      Strides = T.sym_strides();
    const int64_t *D = P.dims();
    for (unsigned I = 0; I < P.NDim; ++I) {
      if (!(P.DynamicSizes >> I & 1) && symIntDiffers(Sizes[I], D[2 * I]))
        return 0;
      if (P.DynamicStrides >> I & 1)
        continue;
      if (NoStrides ? D[2 * I + 1] != -1
                    : symIntDiffers(Strides[I], D[2 * I + 1]))
        return 0;
    }
    return 1;
  } catch (...) {
    // e.g. sym_strides() of a sparse COO tensor, or a symbolic compare that
    // cannot be decided; Dynamo would raise out of the check.
    PyErr_Clear();
    return 0;
  }
}

void releaseTensorMatch(void *Payload) {
  auto *P = static_cast<TensorPayload *>(Payload);
  P->~TensorPayload();
  ::operator delete(P, std::align_val_t(alignof(TensorPayload)));
}

void *prepareTensorMatch(const GuardSet &Set, const Guard &G,
                         PyObject *const *Objects, std::string *Error) {
  const TensorSpec &Spec = Set.tensorSpec(G.Tensor);
  PyObject *Type = Objects[Spec.PyType];
  if (!THPVariableClass || !PyType_Check(Type) ||
      !PyType_IsSubtype(reinterpret_cast<PyTypeObject *>(Type),
                        reinterpret_cast<PyTypeObject *>(THPVariableClass))) {
    *Error = "tensor spec type is not a torch.Tensor type";
    return nullptr;
  }
  if (Spec.Strides.size() != Spec.Sizes.size()) {
    *Error = "tensor spec has " + std::to_string(Spec.Sizes.size()) +
             " sizes but " + std::to_string(Spec.Strides.size()) + " strides";
    return nullptr;
  }
  if (Spec.DType < 0 ||
      Spec.DType >= static_cast<int8_t>(c10::ScalarType::NumOptions)) {
    *Error = "tensor spec dtype " + std::to_string(Spec.DType) +
             " is not a c10::ScalarType";
    return nullptr;
  }
  if (Spec.Sizes.size() > TensorPayload::MaxDims) {
    *Error = "tensor spec has " + std::to_string(Spec.Sizes.size()) +
             " dims; guardjit's TENSOR_MATCH takes at most " +
             std::to_string(TensorPayload::MaxDims);
    return nullptr;
  }
  size_t NDim = Spec.Sizes.size();
  void *Mem = ::operator new(sizeof(TensorPayload) + 2 * NDim * sizeof(int64_t),
                             std::align_val_t(alignof(TensorPayload)));
  auto *P = new (Mem) TensorPayload{reinterpret_cast<PyTypeObject *>(Type),
                                    Spec.DispatchKeys,
                                    static_cast<c10::ScalarType>(Spec.DType),
                                    static_cast<c10::DeviceIndex>(Spec.DeviceIndex),
                                    Spec.RequiresGrad,
                                    static_cast<uint8_t>(NDim),
                                    0,
                                    0,
                                    verifiedTensorLayout().AutogradMetaVTable,
                                    verifiedTensorLayout().ViewMetaVTable};
  int64_t *D = P->dims();
  for (size_t I = 0; I < NDim; ++I) {
    D[2 * I] = Spec.Sizes[I].value_or(0);
    D[2 * I + 1] = Spec.Strides[I].value_or(0);
    if (!Spec.Sizes[I])
      P->DynamicSizes |= uint32_t(1) << I;
    if (!Spec.Strides[I])
      P->DynamicStrides |= uint32_t(1) << I;
  }
  return P;
}

//===----------------------------------------------------------------------===//
// GLOBAL_STATE
//===----------------------------------------------------------------------===//

constexpr size_t NumAutocastDevices =
    at::autocast::_AUTOCAST_SUPPORTED_DEVICES.size();

/// Every field GlobalStateGuard::check compares, as its JSON stores them.
struct GlobalStatePayload {
  bool GradMode;
  std::array<bool, NumAutocastDevices> AutocastEnabled;
  std::array<c10::ScalarType, NumAutocastDevices> AutocastDType;
  bool AutocastCacheEnabled;
  bool TorchFunction;
  bool TorchFunctionAllDisabled;
  bool DeterministicAlgorithms;
  bool DeterministicAlgorithmsWarnOnly;
  bool AllowTF32;
  at::CuBLASReductionOption AllowFP16Reduce;
  at::CuBLASReductionOption AllowBF16Reduce;
  int NumThreads;
  c10::ScalarType DefaultDType;
};

int globalState(const void *Payload) {
  const auto &P = *static_cast<const GlobalStatePayload *>(Payload);
  try {
    if (P.GradMode != at::GradMode::is_enabled())
      return 0;
    // AutocastState::operator==: the dtype of a device is ignored when
    // autocast is disabled on both sides.
    for (size_t I = 0; I < NumAutocastDevices; ++I) {
      c10::DeviceType D = at::autocast::_AUTOCAST_SUPPORTED_DEVICES[I];
      bool Enabled = at::autocast::is_autocast_enabled(D);
      if (!Enabled && !P.AutocastEnabled[I])
        continue;
      if (Enabled != P.AutocastEnabled[I] ||
          at::autocast::get_autocast_dtype(D) != P.AutocastDType[I])
        return 0;
    }
    if (P.AutocastCacheEnabled != at::autocast::is_autocast_cache_enabled())
      return 0;
    // torch::torch_function_enabled() is not exported; it is this compare.
    at::impl::TorchFunctionDisabledState TF =
        at::impl::PythonTorchFunctionTLS::get_disabled_state();
    if (P.TorchFunction != (TF == at::impl::TorchFunctionDisabledState::ENABLED))
      return 0;
    if (P.TorchFunctionAllDisabled != at::impl::torch_function_all_disabled())
      return 0;
    at::Context &Ctx = at::globalContext();
    if (P.DeterministicAlgorithms != Ctx.deterministicAlgorithms() ||
        P.DeterministicAlgorithmsWarnOnly !=
            Ctx.deterministicAlgorithmsWarnOnly())
      return 0;
    bool AllowTF32 = Ctx.float32Precision(at::Float32Backend::CUDA,
                                          at::Float32Op::MATMUL) ==
                     at::Float32Precision::TF32;
    if (P.AllowTF32 != AllowTF32 ||
        P.AllowFP16Reduce != Ctx.allowFP16ReductionCuBLAS() ||
        P.AllowBF16Reduce != Ctx.allowBF16ReductionCuBLAS())
      return 0;
    if (P.NumThreads != at::get_num_threads())
      return 0;
    return P.DefaultDType == c10::get_default_dtype_as_scalartype();
  } catch (...) {
    return 0;
  }
}

/// Reads JSON fields out of the dict json.loads produced. Each getter sets
/// Error on a missing or mistyped field (Python errors are cleared).
class JsonReader {
public:
  JsonReader(std::string *Error) : Error(Error) {}
  bool failed() const { return Failed; }

  PyObject *field(PyObject *Dict, const char *Name) {
    PyObject *V = PyDict_Check(Dict) ? PyDict_GetItemString(Dict, Name)
                                     : nullptr;
    if (!V)
      fail(std::string("missing field '") + Name + "'");
    return V;
  }
  bool getBool(PyObject *Dict, const char *Name) {
    PyObject *V = field(Dict, Name);
    if (V && !PyBool_Check(V))
      fail(std::string("field '") + Name + "' is not a bool");
    return V == Py_True;
  }
  int64_t getInt(PyObject *Dict, const char *Name) {
    return asInt(field(Dict, Name), Name);
  }
  int64_t asInt(PyObject *V, const char *Name) {
    if (!V)
      return 0;
    if (!PyLong_Check(V) || PyBool_Check(V)) {
      fail(std::string("field '") + Name + "' is not an int");
      return 0;
    }
    int64_t X = PyLong_AsLongLong(V);
    if (X == -1 && PyErr_Occurred()) {
      PyErr_Clear();
      fail(std::string("field '") + Name + "' does not fit in 64 bits");
    }
    return X;
  }
  /// A list of exactly N items.
  PyObject *getList(PyObject *Dict, const char *Name, size_t N) {
    PyObject *V = field(Dict, Name);
    if (V && (!PyList_Check(V) || PyList_GET_SIZE(V) != (Py_ssize_t)N)) {
      fail(std::string("field '") + Name + "' is not a list of " +
           std::to_string(N) + " items");
      return nullptr;
    }
    return V;
  }
  void fail(std::string Msg) {
    if (!Failed)
      *Error = "GlobalStateGuard JSON: " + std::move(Msg);
    Failed = true;
  }

private:
  std::string *Error;
  bool Failed = false;
};

bool validScalarType(int64_t X) {
  return X >= 0 && X < static_cast<int64_t>(c10::ScalarType::NumOptions);
}

bool validReduction(int64_t X) { return X >= 0 && X <= 2; }

void *prepareGlobalState(const Guard &G, std::string *Error) {
  // Parsed with CPython's json module: prepare runs once per bind with the
  // GIL held, and this keeps a JSON library out of the build.
  PyObject *JsonModule = PyImport_ImportModule("json");
  PyObject *Text = PyUnicode_FromStringAndSize(
      G.Str.data(), static_cast<Py_ssize_t>(G.Str.size()));
  PyObject *Loads = JsonModule ? PyUnicode_InternFromString("loads") : nullptr;
  PyObject *Dict = JsonModule && Text && Loads
                       ? PyObject_CallMethodOneArg(JsonModule, Loads, Text)
                       : nullptr;
  Py_XDECREF(Loads);
  Py_XDECREF(Text);
  Py_XDECREF(JsonModule);
  if (!Dict) {
    PyErr_Clear();
    *Error = "GLOBAL_STATE needs the JSON of GlobalStateGuard.__getstate__() "
             "in Guard.Str";
    return nullptr;
  }
  auto *P = new GlobalStatePayload();
  JsonReader R(Error);
  P->GradMode = R.getBool(Dict, "grad_mode");
  if (PyObject *Autocast = R.field(Dict, "autocast_state")) {
    PyObject *Enabled = R.getList(Autocast, "enabled", NumAutocastDevices);
    PyObject *DType = R.getList(Autocast, "dtype", NumAutocastDevices);
    for (size_t I = 0; Enabled && DType && I < NumAutocastDevices; ++I) {
      PyObject *E = PyList_GET_ITEM(Enabled, I);
      if (!PyBool_Check(E))
        R.fail("autocast_state.enabled items must be bools");
      P->AutocastEnabled[I] = E == Py_True;
      int64_t D = R.asInt(PyList_GET_ITEM(DType, I), "autocast_state.dtype");
      if (!validScalarType(D))
        R.fail("autocast_state.dtype item is not a c10::ScalarType");
      P->AutocastDType[I] = static_cast<c10::ScalarType>(D);
    }
    P->AutocastCacheEnabled = R.getBool(Autocast, "cached_enabled");
  }
  P->TorchFunction = R.getBool(Dict, "torch_function");
  P->TorchFunctionAllDisabled = R.getBool(Dict, "torch_function_all_disabled");
  P->DeterministicAlgorithms = R.getBool(Dict, "deterministic_algorithms");
  P->DeterministicAlgorithmsWarnOnly =
      R.getBool(Dict, "deterministic_algorithms_warn_only");
  P->AllowTF32 = R.getBool(Dict, "allow_tf32");
  int64_t FP16 = R.getInt(Dict, "allow_fp16_reduce");
  int64_t BF16 = R.getInt(Dict, "allow_bf16_reduce");
  if (!validReduction(FP16) || !validReduction(BF16))
    R.fail("allow_*_reduce is not a CuBLASReductionOption");
  P->AllowFP16Reduce = static_cast<at::CuBLASReductionOption>(FP16);
  P->AllowBF16Reduce = static_cast<at::CuBLASReductionOption>(BF16);
  P->NumThreads = static_cast<int>(R.getInt(Dict, "num_threads"));
  int64_t DefaultDType = R.getInt(Dict, "default_dtype");
  if (!validScalarType(DefaultDType))
    R.fail("default_dtype is not a c10::ScalarType");
  P->DefaultDType = static_cast<c10::ScalarType>(DefaultDType);
  Py_DECREF(Dict);
  if (R.failed()) {
    delete P;
    return nullptr;
  }
  return P;
}

//===----------------------------------------------------------------------===//
// TORCH_FUNCTION_MODE_STACK
//===----------------------------------------------------------------------===//

/// The expected type of each mode, bottom of the stack first. Strong
/// references: the recorder's tuple could be a temporary.
struct ModeStackPayload {
  std::vector<PyTypeObject *> Types;
};

int torchFunctionModeStack(const void *Payload) {
  const auto &P = *static_cast<const ModeStackPayload *>(Payload);
  try {
    int64_t Len = at::impl::PythonTorchFunctionTLS::stack_len();
    if (Len != static_cast<int64_t>(P.Types.size()))
      return 0;
    for (int64_t I = 0; I < Len; ++I) {
      const std::shared_ptr<c10::SafePyObject> &Mode =
          at::impl::PythonTorchFunctionTLS::get_stack_at(I);
      if (Py_TYPE(Mode->ptr(getPyInterpreter())) != P.Types[I])
        return 0;
    }
    return 1;
  } catch (...) {
    return 0;
  }
}

void *prepareModeStack(const Guard &G, PyObject *const *Objects,
                       std::string *Error) {
  PyObject *Spec = Objects[G.Object];
  if (!PyTuple_Check(Spec) && !PyList_Check(Spec)) {
    *Error = "TORCH_FUNCTION_MODE_STACK needs a tuple or list of mode types";
    return nullptr;
  }
  auto *P = new ModeStackPayload();
  for (Py_ssize_t I = 0, N = PySequence_Fast_GET_SIZE(Spec); I < N; ++I) {
    PyObject *T = PySequence_Fast_GET_ITEM(Spec, I);
    if (!PyType_Check(T)) {
      *Error = "TORCH_FUNCTION_MODE_STACK item " + std::to_string(I) +
               " is not a type (store type(mode), not the mode)";
      for (PyTypeObject *Held : P->Types)
        Py_DECREF(Held);
      delete P;
      return nullptr;
    }
    Py_INCREF(T);
    P->Types.push_back(reinterpret_cast<PyTypeObject *>(T));
  }
  return P;
}

/// THPVariable_Check as torch's accessors call it (isinstance(obj,
/// torch.Tensor), subclasses and `__class__` overrides honoured), without its
/// two ways out of a guard: an error from isinstance (a raising `__class__`)
/// is a C++ python_error that torch lets escape, and an object that only
/// claims to be a tensor is unpacked as one (torch segfaults). Both are a
/// failed read here, the error cleared.
static bool isTensorObject(PyObject *Value) {
  if (THPVariable_CheckExact(Value))
    return true;
  if (!THPVariableClass)
    return false;
  int IsInstance = PyObject_IsInstance(Value, THPVariableClass);
  if (IsInstance < 0) {
    PyErr_Clear();
    return false;
  }
  return IsInstance > 0 &&
         PyObject_TypeCheck(Value,
                            reinterpret_cast<PyTypeObject *>(THPVariableClass));
}

//===----------------------------------------------------------------------===//
// GradGuardAccessor
//===----------------------------------------------------------------------===//

/// GradGuardAccessor::check_nopybind: `THPVariable_CheckExact(obj) ||
/// THPVariable_Check(obj)`, then THPVariable_Wrap(THPVariable_Unpack(obj)
/// .grad()) -- the C++ autograd field, so neither __torch_function__ nor a
/// Python `grad` property runs; an undefined grad wraps to None. Tensor::grad
/// warns (TORCH_WARN) for a non-leaf that does not retain its grad, exactly
/// as the torch call does.
PyObject *tensorGrad(PyObject *Value) {
  if (!isTensorObject(Value))
    return nullptr;
  try {
    PyObject *G = THPVariable_Wrap(THPVariable_Unpack(Value).grad());
    if (!G)
      PyErr_Clear();
    return G;
  } catch (...) {
    PyErr_Clear();
    return nullptr;
  }
}

//===----------------------------------------------------------------------===//
// STORAGE_OVERLAPPING
//===----------------------------------------------------------------------===//

/// tensors_definitely_do_not_overlap<StaticMeta> of guards.cpp, line for
/// line. Its precondition ("x and y share a storage") is not checked by
/// torch either: check_overlapping applies it to every pair.
bool definitelyDoNotOverlap(const at::Tensor &X, const at::Tensor &Y) {
  if (X.is_same(Y))
    return false;
  if (X.numel() == 0 || Y.numel() == 0)
    return true;
  // Make x always on the left.
  if (X.storage_offset() > Y.storage_offset())
    return definitelyDoNotOverlap(Y, X);
  // Both contiguous: the "obvious" case.
  if (X.is_contiguous() && Y.is_contiguous())
    return !(X.storage_offset() + X.numel() > Y.storage_offset());
  // The last element of x before the start of y.
  int64_t XLast = X.storage_offset();
  for (int64_t I = 0; I < X.dim(); ++I)
    XLast += (X.size(I) - 1) * X.stride(I);
  if (XLast < Y.storage_offset())
    return true;
  if (X.dim() == 2 && Y.dim() == 2 && X.stride(1) == 1 && Y.stride(1) == 1) {
    // 2-d, rows contiguous, same outer stride (torch's shampoo case).
    if (X.stride(0) == Y.stride(0)) {
      int64_t OffsetDelta = Y.storage_offset() - X.storage_offset();
      if (OffsetDelta < X.size(1))
        return false;
      int64_t XTotal = X.stride(0) * (X.size(0) - 1) + X.size(1);
      if (XTotal <= OffsetDelta)
        return true;
      int64_t OffsetDeltaMod = OffsetDelta % X.stride(0);
      if (OffsetDeltaMod + Y.size(1) <= X.stride(0))
        return true;
    }
  }
  return false;
}

/// check_overlapping(overlapping, non_overlapping): the indices of tensors
/// that may overlap some other tensor (compute_overlapping_tensors over the
/// concatenation) must be exactly the first NumOverlapping ones.
int storageOverlapping(PyObject *const *Objects, size_t N,
                       size_t NumOverlapping) {
  try {
    std::vector<at::Tensor> Tensors;
    Tensors.reserve(N);
    for (size_t I = 0; I < N; ++I) {
      // StorageOverlapChecker::add TORCH_CHECKs a tensor (torch raises out of
      // the check); a failed check here.
      if (!isTensorObject(Objects[I]))
        return 0;
      Tensors.push_back(THPVariable_Unpack(Objects[I]));
    }
    std::vector<char> Aliased(N, 0);
    for (size_t I = 0; I < N; ++I)
      for (size_t J = 0; J < I; ++J)
        if (!definitelyDoNotOverlap(Tensors[I], Tensors[J]))
          Aliased[I] = Aliased[J] = 1;
    for (size_t I = 0; I < N; ++I)
      if (Aliased[I] != (I < NumOverlapping ? 1 : 0))
        return 0;
    return 1;
  } catch (...) {
    // e.g. numel() of a tensor with symbolic sizes (StaticMeta throws too).
    PyErr_Clear();
    return 0;
  }
}

//===----------------------------------------------------------------------===//
// prepare / release
//===----------------------------------------------------------------------===//

void *prepare(const GuardSet &Set, const Guard &G, PyObject *const *Objects,
              std::string *Error) {
  std::string Ignored;
  if (!Error)
    Error = &Ignored;
  switch (G.Kind) {
  case GuardKind::TensorMatch:
    return prepareTensorMatch(Set, G, Objects, Error);
  case GuardKind::GlobalState:
    return prepareGlobalState(G, Error);
  case GuardKind::TorchFunctionModeStack:
    return prepareModeStack(G, Objects, Error);
  default:
    *Error = "not a torch guard";
    return nullptr;
  }
}

void release(const Guard &G, void *Payload) {
  switch (G.Kind) {
  case GuardKind::TensorMatch:
    releaseTensorMatch(Payload);
    return;
  case GuardKind::GlobalState:
    delete static_cast<GlobalStatePayload *>(Payload);
    return;
  case GuardKind::TorchFunctionModeStack: {
    auto *P = static_cast<ModeStackPayload *>(Payload);
    for (PyTypeObject *T : P->Types)
      Py_DECREF(T);
    delete P;
    return;
  }
  default:
    return;
  }
}

//===----------------------------------------------------------------------===//
// Tensor properties (TensorPropertyGuardAccessor)
//===----------------------------------------------------------------------===//

/// torch's TensorPropertyGuardAccessor<SIZE|STRIDE|STORAGE_OFFSET>: a
/// THPVariable (subclasses too), an index below dim() for sizes and strides,
/// and a concrete value (`maybe_as_int()`; a symbolic one fails).
int tensorProperty(PyObject *Value, int Property, int64_t Index,
                   int64_t *Out) {
  if (!isTensorObject(Value))
    return 0;
  try {
    const at::Tensor &T = THPVariable_Unpack(Value);
    std::optional<int64_t> V;
    if (Property == 2) {
      V = T.sym_storage_offset().maybe_as_int();
    } else {
      if (Index < 0 || Index >= T.dim())
        return 0;
      V = Property == 0 ? T.sym_size(Index).maybe_as_int()
                        : T.sym_stride(Index).maybe_as_int();
    }
    if (!V)
      return 0;
    *Out = *V;
    return 1;
  } catch (...) {
    return 0; // e.g. strides of a sparse tensor: the read fails
  }
}

//===----------------------------------------------------------------------===//
// AUTOGRAD_SAVED_TENSORS_HOOKS
//===----------------------------------------------------------------------===//

/// Dynamo's lambda, torch 2.13 torch/_dynamo/guards.py
/// GuardBuilder.AUTOGRAD_SAVED_TENSORS_HOOKS, is
///
///   fn(x) = guard_hooks_ids == hooks_ids_fn(get_hooks())
///   get_hooks() = torch._C._autograd._top_saved_tensors_default_hooks(True)
///   hooks_ids_fn(h) = tuple(map(id, h)) if saved_tensors_hooks_are_inlineable(h)
///                     else None
///   saved_tensors_hooks_are_inlineable(h) =   (_functorch/_aot_autograd/utils.py)
///       bool(h) and isinstance(pack, torch.fx.GraphModule)
///               and isinstance(unpack, torch.fx.GraphModule)
///
/// and the binding (torch/csrc/autograd/init.cpp) returns None or the pair
/// (pack, unpack) of at::SavedTensorDefaultHooks::get_hooks(ignore_is_tracing)
/// -- the function called here. `and` short-circuits, so unpack is tested
/// only when pack is a GraphModule; an isinstance that raises makes the
/// lambda raise, which fails the guard. ids are compared as the ints Dynamo
/// keeps (it holds no reference to the hooks, and neither does this guard).
int savedTensorsHooks(PyObject *GraphModule, int HasIds, int64_t PackId,
                      int64_t UnpackId) {
  try {
    std::optional<std::pair<c10::SafePyObject, c10::SafePyObject>> Hooks =
        at::SavedTensorDefaultHooks::get_hooks(/*ignore_is_tracing=*/true);
    if (!Hooks)
      return !HasIds;
    PyObject *Pack = Hooks->first.ptr(getPyInterpreter());
    PyObject *Unpack = Hooks->second.ptr(getPyInterpreter());
    int Inlineable = PyObject_IsInstance(Pack, GraphModule);
    if (Inlineable > 0)
      Inlineable = PyObject_IsInstance(Unpack, GraphModule);
    if (Inlineable < 0) {
      PyErr_Clear();
      return 0;
    }
    if (!Inlineable)
      return !HasIds;
    return HasIds && reinterpret_cast<intptr_t>(Pack) == PackId &&
           reinterpret_cast<intptr_t>(Unpack) == UnpackId;
  } catch (...) {
    return 0;
  }
}

//===----------------------------------------------------------------------===//
// COW_TENSOR_MATCH (torch 2.14)
//===----------------------------------------------------------------------===//

/// Dynamo's lambda, torch 2.14 torch/_dynamo/guards.py
/// GuardBuilder.COW_TENSOR_MATCH, is guard_fn(x) = _cow_tensor_matches(x,
/// expected) with `expected` a bool and
///
///   _cow_tensor_matches(v, e) = isinstance(e, bool) and
///       (a := _try_is_cow_tensor(v)) is not _COW_TENSOR_UNSUPPORTED and a == e
///   _try_is_cow_tensor(v) =
///       _COW_TENSOR_UNSUPPORTED if not isinstance(v, torch.Tensor)
///       _COW_TENSOR_UNSUPPORTED if torch._C._dispatch_keys(v).has(Python)
///       torch._C._is_cow_tensor(v)
///
/// _dispatch_keys is `tensor.unsafeGetTensorImpl()->key_set()`
/// (torch/csrc/utils/python_dispatch.cpp) and _is_cow_tensor is
/// `c10::impl::cow::is_cow_data_ptr(tensor.storage().data_ptr())`
/// (torch/csrc/Module.cpp), both taking the tensor through pybind's
/// at::Tensor caster (THPVariable_Check, then THPVariable_Unpack).
/// isinstance is THPVariable_Check without the throw: PyObject_IsInstance,
/// which honours a `__class__` override. Where torch would unpack an object
/// that only claims to be a tensor (it segfaults) or dereference a tensor
/// without a storage, the guard fails; a C++ exception (storage() of a
/// sparse tensor, data_ptr() of a fake one) is the lambda's RuntimeError:
/// the guard fails.
int cowTensorMatch(PyObject *Value, int Expected) {
  if (!isTensorObject(Value))
    return 0;
  try {
    const at::Tensor &T = THPVariable_Unpack(Value);
    if (T.unsafeGetTensorImpl()->key_set().has(c10::DispatchKey::Python))
      return 0;
    const c10::Storage &S = T.storage();
    if (!S)
      return 0;
    return c10::impl::cow::is_cow_data_ptr(S.data_ptr()) == (Expected != 0);
  } catch (...) {
    PyErr_Clear();
    return 0;
  }
}

TorchHooks AtenHooks = {readLocalState,   tensorMatch,
                        globalState,      torchFunctionModeStack,
                        prepare,          release,
                        tensorGrad,       storageOverlapping,
                        tensorProperty,   savedTensorsHooks,
                        cowTensorMatch,   nullptr};

} // namespace

void guardjit::setInModeWithoutIgnoreCompileInternals(bool InMode) {
  InModeWithoutIgnoreCompileInternals = InMode;
}

bool guardjit::masksPythonKeys() { return shouldMaskPythonKeys(); }

void guardjit::installTorchRuntime() {
  // The layout is checked (once) before the table is published, so a JIT
  // thread that reads the table sees the verdict.
  AtenHooks.tensorLayout = &verifiedTensorLayout();
  setTorchHooks(&AtenHooks);
}

const char *guardjit::tensorLayoutStatus() {
  return verifiedTensorLayout().Status;
}

//===- TensorLayout.cpp - TensorImpl offsets for inline TENSOR_MATCH ------===//
//
// The TensorLayout of TorchHooks.h, in three steps:
//
//   1. Offsets from torch's headers. Each field is named by a member pointer
//      (private and protected ones through the explicit-instantiation idiom
//      below, which the standard exempts from access checking) and turned
//      into a byte offset on a real object. Bit-fields have no address: they
//      are placed by the declaration order in c10/core/TensorImpl.h (see
//      bitFieldBytes).
//   2. A check of every offset, on probe tensors built in Python, against
//      torch's accessors: the TensorImpl, key_set(), scalar_type(),
//      device(), sizes().data(), strides().data(), autograd_meta(),
//      requires_grad(), has_symbolic_sizes_strides(), and the policy
//      bit-fields against what the probe's constructor sets (Python wrapper
//      subclasses: what their dispatch_* arguments ask; plain tensors:
//      none). The probes cost about 1 ms of import.
//   3. The verdict: Verified, or Status naming the first mismatch. The JIT
//      calls the helper unless Verified.
//
// torch 2.13 semantics the inline path relies on (c10/core/TensorImpl.h,
// torch/csrc/autograd/variable.h, c10/core/TensorImpl.cpp):
//   - sym_sizes()/sym_strides() read sizes_and_strides_ unless
//     matches_policy(CustomSizes/CustomStrides), i.e. unless
//     sizes_strides_policy_ != 0; refresh_sizes_strides_policy() sets it to
//     CustomSizes whenever has_symbolic_sizes_strides_.
//   - device() is *device_opt_ unless device_policy_; layout() is read from
//     the key set unless layout_policy_.
//   - scalar_type() is data_type_.toScalarType(): the TypeMeta index when it
//     is below NumScalarTypes (else it throws: the helper's failed check).
//   - requires_grad() is `autograd_meta_ && autograd_meta_->requires_grad()`
//     and AutogradMeta::requires_grad() is `requires_grad_ || grad_fn_`;
//     DifferentiableViewMeta overrides it with `... || (has_bw_view() &&
//     get_backward_view().base_.requires_grad())`. The vtable pointer tells
//     the two classes apart; any other class goes to the helper, as does a
//     view whose base's meta is not a plain AutogradMeta.
//
//===----------------------------------------------------------------------===//
#include "TensorLayout.h"

// First, so CPython is configured our way before the torch headers.
#include "guardjit/Runtime/Python.h"

#include <c10/core/TensorImpl.h>
#include <c10/core/impl/SizesAndStrides.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/autograd/variable.h>

#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <typeinfo>

using namespace guardjit;

namespace {

//===----------------------------------------------------------------------===//
// 1. Offsets from the headers
//===----------------------------------------------------------------------===//

/// The explicit-instantiation idiom: an explicit instantiation may name a
/// private member ([temp.spec.general]/6), and the friend it defines hands
/// the member pointer out.
template <typename Tag, typename Tag::Type M> struct Steal {
  friend typename Tag::Type get(Tag) { return M; }
};

#define GUARDJIT_MEMBER(TagName, Class, FieldType, Field)                     \
  struct TagName {                                                             \
    using Type = FieldType Class::*;                                           \
    friend Type get(TagName);                                                  \
  };                                                                           \
  template struct Steal<TagName, &Class::Field>;

GUARDJIT_MEMBER(KeySetField, c10::TensorImpl, c10::DispatchKeySet, key_set_)
GUARDJIT_MEMBER(DTypeField, c10::TensorImpl, caffe2::TypeMeta, data_type_)
GUARDJIT_MEMBER(DeviceField, c10::TensorImpl, std::optional<c10::Device>,
                device_opt_)
GUARDJIT_MEMBER(SizesField, c10::TensorImpl, c10::impl::SizesAndStrides,
                sizes_and_strides_)
GUARDJIT_MEMBER(AutogradMetaField, c10::TensorImpl,
                std::unique_ptr<c10::AutogradMetaInterface>, autograd_meta_)
GUARDJIT_MEMBER(SasSizeField, c10::impl::SizesAndStrides, size_t, size_)
GUARDJIT_MEMBER(TypeIndexField, caffe2::TypeMeta, uint16_t, index_)
GUARDJIT_MEMBER(DeviceIndexField, c10::Device, c10::DeviceIndex, index_)
GUARDJIT_MEMBER(BackwardInfoField, torch::autograd::DifferentiableViewMeta,
                std::optional<torch::autograd::ViewInfo>, backward_info_)
#undef GUARDJIT_MEMBER

template <typename C, typename T>
int32_t offsetIn(const C *Object, T C::*Member) {
  return static_cast<int32_t>(reinterpret_cast<const char *>(
                                  &(Object->*Member)) -
                              reinterpret_cast<const char *>(Object));
}

// The fields read with a fixed width.
static_assert(sizeof(c10::DispatchKeySet) == 8);
static_assert(sizeof(caffe2::TypeMeta) == 2);
static_assert(sizeof(c10::DeviceIndex) == 1 && sizeof(c10::Device) == 2);
static_assert(sizeof(size_t) == 8 && sizeof(int64_t) == 8);
static_assert(C10_SIZES_AND_STRIDES_MAX_INLINE_SIZE == 5);
// libstdc++'s std::optional<T>: the T, then the engaged bool.
static_assert(sizeof(std::optional<c10::Device>) == 3);

/// TensorImpl's bit-fields follow device_opt_ (c10/core/TensorImpl.h, torch
/// 2.13) and are all of 1-byte types, so the Itanium ABI packs them from the
/// byte after it: byte 0 holds the eight one-bit flags is_contiguous_ ..
/// is_wrapped_number_; byte 1 allow_tensor_metadata_change_ (bit 0),
/// reserved_ (1), sizes_strides_policy_ (2-3), has_symbolic_sizes_strides_
/// (4), custom_sizes_strides_ (5-6), device_policy_ (7); byte 2
/// layout_policy_ (0), ... The probes check the policy bits both ways.
constexpr int32_t PolicyByte = 1;
constexpr unsigned SizesPolicyShift = 2, SymbolicShift = 4;
constexpr unsigned DevicePolicyShift = 7;
constexpr int32_t LayoutPolicyByte = 2;
constexpr unsigned LayoutPolicyShift = 0;

void takeOffsets(TensorLayout &L, PyObject *Probe) {
  auto *V = reinterpret_cast<THPVariable *>(Probe);
  const c10::TensorImpl *I = V->cdata.unsafeGetTensorImpl();
  // at::Tensor is one intrusive_ptr<TensorImpl> whose only field is the
  // pointer.
  static_assert(sizeof(at::Tensor) == sizeof(void *));
  L.Impl = static_cast<int32_t>(reinterpret_cast<const char *>(&V->cdata) -
                                reinterpret_cast<const char *>(V));
  L.KeySet = offsetIn(I, get(KeySetField()));
  L.DType = offsetIn(I, get(DTypeField())) +
            offsetIn(&(I->*get(DTypeField())), get(TypeIndexField()));
  int32_t Device = offsetIn(I, get(DeviceField()));
  const std::optional<c10::Device> &Opt = I->*get(DeviceField());
  // Engaged on every probe; the offset of the Device inside the optional.
  int32_t InOptional = static_cast<int32_t>(
      reinterpret_cast<const char *>(&*Opt) -
      reinterpret_cast<const char *>(&Opt));
  L.DeviceIndex =
      Device + InOptional + offsetIn(&*Opt, get(DeviceIndexField()));
  L.DeviceEngaged = Device + static_cast<int32_t>(sizeof(c10::Device));
  int32_t BitFields = Device + static_cast<int32_t>(sizeof(Opt));
  L.Policy = BitFields + PolicyByte;
  L.PolicyMask = uint8_t(3u << SizesPolicyShift | 1u << SymbolicShift |
                         1u << DevicePolicyShift);
  L.LayoutPolicy = BitFields + LayoutPolicyByte;
  L.LayoutPolicyMask = uint8_t(1u << LayoutPolicyShift);
  L.SizesAndStrides = offsetIn(I, get(SizesField()));
  L.InlineDims = C10_SIZES_AND_STRIDES_MAX_INLINE_SIZE;
  L.AutogradMeta = offsetIn(I, get(AutogradMetaField()));
  L.NumScalarTypes = c10::NumScalarTypes;
  L.HelperKeys =
      c10::DispatchKeySet({c10::DispatchKey::Python,
                           c10::DispatchKey::PythonTLSSnapshot,
                           c10::DispatchKey::PythonDispatcher,
                           c10::DispatchKey::Sparse,
                           c10::DispatchKey::SparseCsr,
                           c10::DispatchKey::NestedTensor,
                           c10::DispatchKey::Functionalize,
                           c10::DispatchKey::FuncTorchBatched,
                           c10::DispatchKey::BatchedNestedTensor,
                           c10::DispatchKey::FuncTorchGradWrapper})
          .raw_repr();
}

/// The AutogradMeta fields, on the plain AutogradMeta of a leaf that
/// requires grad.
bool takeAutogradOffsets(TensorLayout &L, PyObject *Leaf, std::string &Why) {
  c10::AutogradMetaInterface *Interface =
      THPVariable_Unpack(Leaf).unsafeGetTensorImpl()->autograd_meta();
  if (!Interface ||
      typeid(*Interface) != typeid(torch::autograd::AutogradMeta)) {
    Why = "the leaf probe has no plain AutogradMeta";
    return false;
  }
  auto *Meta = static_cast<torch::autograd::AutogradMeta *>(Interface);
  if (static_cast<void *>(Meta) != static_cast<void *>(Interface)) {
    Why = "AutogradMeta is not at the start of its interface";
    return false;
  }
  std::memcpy(&L.AutogradMetaVTable, Meta, sizeof(uint64_t));
  L.RequiresGrad =
      offsetIn(Meta, &torch::autograd::AutogradMeta::requires_grad_);
  L.GradFn = offsetIn(Meta, &torch::autograd::AutogradMeta::grad_fn_);
  static_assert(sizeof(Meta->grad_fn_) == sizeof(void *));
  return true;
}

/// The DifferentiableViewMeta fields, on a view of that leaf (whose
/// backward view is engaged).
bool takeViewOffsets(TensorLayout &L, PyObject *View, std::string &Why) {
  using torch::autograd::DifferentiableViewMeta;
  using torch::autograd::ViewInfo;
  c10::AutogradMetaInterface *Interface =
      THPVariable_Unpack(View).unsafeGetTensorImpl()->autograd_meta();
  if (!Interface || typeid(*Interface) != typeid(DifferentiableViewMeta)) {
    Why = "the view probe has no DifferentiableViewMeta";
    return false;
  }
  auto *Meta = static_cast<DifferentiableViewMeta *>(Interface);
  if (static_cast<void *>(Meta) != static_cast<void *>(Interface) ||
      !Meta->has_bw_view()) {
    Why = "the view probe's DifferentiableViewMeta is not the plain case";
    return false;
  }
  std::memcpy(&L.ViewMetaVTable, Meta, sizeof(uint64_t));
  const std::optional<ViewInfo> &Info = Meta->*get(BackwardInfoField());
  int32_t InfoOffset =
      offsetIn(static_cast<const DifferentiableViewMeta *>(Meta),
               get(BackwardInfoField()));
  // libstdc++'s std::optional<T>: the T's storage, then the engaged bool.
  L.ViewEngaged = InfoOffset + static_cast<int32_t>(sizeof(ViewInfo));
  L.ViewBase = InfoOffset +
               static_cast<int32_t>(reinterpret_cast<const char *>(&*Info) -
                                    reinterpret_cast<const char *>(&Info)) +
               offsetIn(&*Info, &ViewInfo::base_);
  return true;
}

/// GUARDJIT_POISON_TENSOR_LAYOUT=<field>: a wrong offset, for the tests
/// that show a failed check keeps the helper.
void poison(TensorLayout &L) {
  const char *Env = std::getenv("GUARDJIT_POISON_TENSOR_LAYOUT");
  if (!Env || !*Env)
    return;
  std::string F = Env;
  if (F == "impl") L.Impl += 8;
  else if (F == "key_set") L.KeySet += 8;
  else if (F == "dtype") L.DType += 8;
  else if (F == "device") L.DeviceIndex += 1;
  else if (F == "policy") L.Policy += 1;
  else if (F == "sizes") L.SizesAndStrides += 8;
  else if (F == "autograd_meta") L.AutogradMeta += 8;
  else if (F == "requires_grad") L.RequiresGrad += 1;
  else if (F == "grad_fn") L.GradFn += 8;
  else if (F == "view_engaged") L.ViewEngaged += 1;
  else if (F == "view_base") L.ViewBase += 8;
}

//===----------------------------------------------------------------------===//
// 2. The probes
//===----------------------------------------------------------------------===//

/// (tensor, sizes_strides_policy_, device_policy_, layout_policy_) with -1
/// for "not asserted". `leaf` is a plain leaf that requires grad, `view` a
/// view of it.
constexpr const char *ProbeSource = R"PY(
import torch

def _probes():
    P = []
    plain = lambda t: P.append((t, 0, 0, 0))
    plain(torch.empty(()))
    plain(torch.zeros(2, 3))
    for dt in (torch.float64, torch.float16, torch.bfloat16, torch.int8,
               torch.uint8, torch.int64, torch.bool, torch.complex64):
        plain(torch.zeros(3, dtype=dt))
    plain(torch.zeros(2, 3, 4, 5, 6))
    plain(torch.zeros(1, 2, 1, 2, 1, 2))
    plain(torch.zeros(2, 2, 2, 2, 2, 2, 2, 2).permute(7, 6, 5, 4, 3, 2, 1, 0))
    plain(torch.zeros(4, 6)[:, ::2])
    plain(torch.zeros(4, 6).t())
    plain(torch.zeros(0, 3))
    plain(torch.zeros(2, device="meta"))
    leaf = torch.zeros(3, requires_grad=True)
    plain(leaf)
    plain(leaf * 2)
    view = leaf[1:]
    plain(view)
    plain(leaf[1:][1:])
    with torch.no_grad():
        plain(leaf[1:])
    base = torch.zeros(3)
    plain(base[1:])
    later = base[1:]
    base.requires_grad_(True)
    plain(later)
    off = torch.zeros(3)
    off.requires_grad_(True)
    off.requires_grad_(False)
    plain(off)
    plain(torch.nn.Parameter(torch.zeros(2, 2)))
    plain(torch.nn.Parameter(torch.zeros(2), requires_grad=False))
    plain(torch.zeros(2, 2).detach())

    class Sub(torch.Tensor):
        pass

    plain(torch.zeros(2).as_subclass(Sub))
    # The policy values come from wrapper subclasses, which set each one on
    # request (sparse and nested tensors would cost 4 and 16 ms of import;
    # their keys send them to the helper anyway).

    class Wrapper(torch.Tensor):
        @staticmethod
        def __new__(cls, **kw):
            return torch.Tensor._make_wrapper_subclass(cls, (2, 3), **kw)

        @classmethod
        def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
            raise NotImplementedError(func)

    P.append((Wrapper(), 0, 0, 0))
    P.append((Wrapper(dispatch_sizes_strides_policy="sizes"), 2, 0, 0))
    P.append((Wrapper(dispatch_sizes_strides_policy="strides"), 1, 0, 0))
    P.append((Wrapper(dispatch_device=True), 0, 1, 0))
    P.append((Wrapper(dispatch_layout=True), 0, 0, 1))
    return leaf, view, P

import warnings

with warnings.catch_warnings():
    # Whatever torch warns about while the probes are made is not the
    # user's concern.
    warnings.simplefilter("ignore")
    leaf, view, probes = _probes()
del _probes, warnings
)PY";

template <typename T> T readAt(const void *Base, int32_t Offset) {
  T V;
  std::memcpy(&V, static_cast<const char *>(Base) + Offset, sizeof(T));
  return V;
}

/// Counts of the autograd cases the probes reached through the fast path's
/// reading: each must be seen at least once for the check to mean anything.
struct Coverage {
  int NoMeta = 0, RequiresGradField = 0, GradFnOnly = 0, MetaNotRequiring = 0,
      HeapDims = 0, InlineDims = 0, ViewOwn = 0, ViewBaseRequires = 0,
      ViewBaseNot = 0;
};

/// requires_grad() of a plain AutogradMeta as the JIT reads it.
bool plainRequiresGrad(const TensorLayout &L, const void *Meta) {
  return readAt<uint8_t>(Meta, L.RequiresGrad) != 0 ||
         readAt<const void *>(Meta, L.GradFn) != nullptr;
}

/// Empty on agreement, else the first field that disagrees.
std::string checkProbe(const TensorLayout &L, PyObject *Obj, long SizesPolicy,
                       long DevicePolicy, long LayoutPolicy, Coverage &C) {
  const at::Tensor &T = THPVariable_Unpack(Obj);
  const c10::TensorImpl *I = T.unsafeGetTensorImpl();
  if (readAt<const void *>(Obj, L.Impl) != I)
    return "impl";
  if (readAt<uint64_t>(I, L.KeySet) != I->key_set().raw_repr())
    return "key_set";
  uint8_t Policy = readAt<uint8_t>(I, L.Policy);
  if (SizesPolicy >= 0 && (Policy >> SizesPolicyShift & 3) != SizesPolicy)
    return "sizes_strides_policy";
  if (bool(Policy >> SymbolicShift & 1) != I->has_symbolic_sizes_strides())
    return "has_symbolic_sizes_strides";
  if (DevicePolicy >= 0 && (Policy >> DevicePolicyShift & 1) != DevicePolicy)
    return "device_policy";
  if (LayoutPolicy >= 0 &&
      (readAt<uint8_t>(I, L.LayoutPolicy) & L.LayoutPolicyMask) !=
          (LayoutPolicy ? L.LayoutPolicyMask : 0))
    return "layout_policy";
  // torch's accessors would run the custom (Python) methods: the policy
  // bits are all the inline path reads of such a tensor.
  if (SizesPolicy || DevicePolicy || LayoutPolicy)
    return "";
  if (readAt<uint16_t>(I, L.DType) != static_cast<uint16_t>(T.scalar_type()))
    return "dtype";
  c10::Device D = T.device();
  if (readAt<int8_t>(I, L.DeviceIndex) != D.index() ||
      readAt<int8_t>(I, L.DeviceIndex - 1) != static_cast<int8_t>(D.type()) ||
      readAt<uint8_t>(I, L.DeviceEngaged) != 1)
    return "device";
  uint64_t NDim = readAt<uint64_t>(I, L.SizesAndStrides);
  if (NDim != static_cast<uint64_t>(T.dim()))
    return "sizes_and_strides.size";
  const char *Storage =
      reinterpret_cast<const char *>(I) + L.SizesAndStrides + 8;
  const int64_t *Sizes, *Strides;
  if (NDim <= static_cast<uint64_t>(L.InlineDims)) {
    Sizes = reinterpret_cast<const int64_t *>(Storage);
    Strides = Sizes + L.InlineDims;
    ++C.InlineDims;
  } else {
    Sizes = readAt<const int64_t *>(Storage, 0);
    Strides = Sizes + NDim;
    ++C.HeapDims;
  }
  if (Sizes != T.sizes().data() || Strides != T.strides().data())
    return "sizes_and_strides";
  const void *Meta = readAt<const void *>(I, L.AutogradMeta);
  if (Meta != I->autograd_meta())
    return "autograd_meta";
  if (!Meta) {
    ++C.NoMeta;
    return T.requires_grad() ? "requires_grad (no autograd meta)" : "";
  }
  if (readAt<uint64_t>(Meta, 0) == L.ViewMetaVTable) {
    auto *View = dynamic_cast<const torch::autograd::DifferentiableViewMeta *>(
        static_cast<const c10::AutogradMetaInterface *>(I->autograd_meta()));
    if (!View)
      return "view meta vtable";
    bool Engaged = readAt<uint8_t>(Meta, L.ViewEngaged) != 0;
    if (Engaged != View->has_bw_view())
      return "view backward_info engaged";
    if (plainRequiresGrad(L, Meta)) {
      ++C.ViewOwn;
      return T.requires_grad() ? "" : "requires_grad (view)";
    }
    if (!Engaged)
      return T.requires_grad() ? "requires_grad (view without base)" : "";
    const void *Base = readAt<const void *>(Meta, L.ViewBase);
    if (Base != View->get_backward_view().base_.unsafeGetTensorImpl())
      return "view base";
    const void *BaseMeta = readAt<const void *>(Base, L.AutogradMeta);
    bool BaseRequires = false;
    if (BaseMeta) {
      if (readAt<uint64_t>(BaseMeta, 0) != L.AutogradMetaVTable)
        return "view base meta class";
      BaseRequires = plainRequiresGrad(L, BaseMeta);
    }
    ++(BaseRequires ? C.ViewBaseRequires : C.ViewBaseNot);
    return BaseRequires == T.requires_grad() ? "" : "requires_grad (view base)";
  }
  if (readAt<uint64_t>(Meta, 0) != L.AutogradMetaVTable)
    return "autograd meta class";
  bool Field = readAt<uint8_t>(Meta, L.RequiresGrad) != 0;
  bool GradFn = readAt<const void *>(Meta, L.GradFn) != nullptr;
  if ((Field || GradFn) != T.requires_grad())
    return "requires_grad";
  if (GradFn != bool(T.grad_fn()))
    return "grad_fn";
  if (Field)
    ++C.RequiresGradField;
  else if (GradFn)
    ++C.GradFnOnly;
  else
    ++C.MetaNotRequiring;
  return "";
}

/// The probes' Python namespace, or null with *Why set.
PyObject *runProbes(std::string &Why) {
  PyObject *Globals = PyDict_New();
  if (!Globals)
    return nullptr;
  PyDict_SetItemString(Globals, "__builtins__", PyEval_GetBuiltins());
  PyObject *R = PyRun_String(ProbeSource, Py_file_input, Globals, Globals);
  if (!R) {
    PyObject *Type, *Value, *Tb;
    PyErr_Fetch(&Type, &Value, &Tb);
    PyObject *S = Value ? PyObject_Str(Value) : nullptr;
    const char *Text = S ? PyUnicode_AsUTF8(S) : nullptr;
    Why = std::string("the probes raised: ") + (Text ? Text : "?");
    Py_XDECREF(S);
    Py_XDECREF(Type);
    Py_XDECREF(Value);
    Py_XDECREF(Tb);
    PyErr_Clear();
    Py_DECREF(Globals);
    return nullptr;
  }
  Py_DECREF(R);
  return Globals;
}

std::string verify(TensorLayout &L) {
  std::string Why;
  PyObject *Globals = runProbes(Why);
  if (!Globals)
    return Why;
  PyObject *Leaf = PyDict_GetItemString(Globals, "leaf");
  PyObject *View = PyDict_GetItemString(Globals, "view");
  PyObject *Probes = PyDict_GetItemString(Globals, "probes");
  if (!Leaf || !View || !Probes || !PyList_Check(Probes) ||
      !THPVariable_Check(Leaf) || !THPVariable_Check(View)) {
    Py_DECREF(Globals);
    return "the probes are missing";
  }
  Coverage C;
  try {
    takeOffsets(L, Leaf);
    if (!takeAutogradOffsets(L, Leaf, Why) ||
        !takeViewOffsets(L, View, Why)) {
      Py_DECREF(Globals);
      return Why;
    }
    poison(L);
    for (Py_ssize_t K = 0; K < PyList_GET_SIZE(Probes) && Why.empty(); ++K) {
      PyObject *Item = PyList_GET_ITEM(Probes, K);
      PyObject *Obj = PyTuple_GET_ITEM(Item, 0);
      long Sizes = PyLong_AsLong(PyTuple_GET_ITEM(Item, 1));
      long Device = PyLong_AsLong(PyTuple_GET_ITEM(Item, 2));
      long Layout = PyLong_AsLong(PyTuple_GET_ITEM(Item, 3));
      if (!THPVariable_Check(Obj))
        Why = "probe " + std::to_string(K) + " is not a tensor";
      else if (std::string F = checkProbe(L, Obj, Sizes, Device, Layout, C);
               !F.empty())
        Why = F + " disagrees with torch on probe " + std::to_string(K);
    }
  } catch (const std::exception &E) {
    Why = std::string("a probe accessor threw: ") + E.what();
  }
  PyErr_Clear();
  Py_DECREF(Globals);
  if (!Why.empty())
    return Why;
  if (!C.NoMeta || !C.RequiresGradField || !C.GradFnOnly ||
      !C.MetaNotRequiring || !C.HeapDims || !C.InlineDims || !C.ViewOwn ||
      !C.ViewBaseRequires || !C.ViewBaseNot)
    return "the probes did not reach every case";
  return "";
}

} // namespace

const TensorLayout &guardjit::verifiedTensorLayout() {
  static const TensorLayout Layout = [] {
    TensorLayout L;
    static std::string Status;
    Status = verify(L);
    L.Verified = Status.empty();
    if (L.Verified)
      Status = "verified";
    L.Status = Status.c_str();
    return L;
  }();
  return Layout;
}

//===- TensorBench.cpp - Cases that need torch objects --------------------===//
//
// TENSOR_MATCH on N distinct tensors (plain, nn.Parameter, requiring grad,
// with a grad_fn, a view), and
// NO_HASATTR on N torch.nn.Module instances (the transformers models' case:
// nn.Module.__getattr__ runs as Python and raises).
//
// The TENSOR_MATCH floor reads what torch's TensorCheck reads from the
// TensorImpl (type, dispatch keys, dtype, device, requires_grad, sizes,
// strides) with the expected values as constants: no payload indirection,
// no SymInt test.
//
//===----------------------------------------------------------------------===//
#include "BenchSupport.h"

#include "guardjit/Runtime/RuntimeHelpers.h"
#include "guardjit/Runtime/TorchHooks.h"

#include <torch/csrc/autograd/python_variable.h>

#include <string>

namespace guardjit::bench {

namespace {

void tensorMatch(const char *Name, const std::string &ItemExpr) {
  PyObject *FL = eval("{'t': tuple(" + ItemExpr + " for i in range(" +
                      std::to_string(N) + "))}");
  PyObject *const *It = tupleItems(FL);
  LocalState State;
  gj_rt_read_local_state(&State);
  const at::Tensor &T0 = THPVariable_Unpack(It[0]);
  uint64_t Keys =
      (T0.key_set().raw_repr() | State.Included) & ~State.Excluded;
  c10::ScalarType DType = T0.scalar_type();
  bool RequiresGrad = T0.requires_grad();
  std::vector<int64_t> Sizes(T0.sizes().begin(), T0.sizes().end());
  std::vector<int64_t> Strides(T0.strides().begin(), T0.strides().end());
  PyTypeObject *Type = Py_TYPE(It[0]);

  SetBuilder SB;
  ValueId TV = SB.local("t");
  ObjectId TypeId = SB.object(reinterpret_cast<PyObject *>(Type),
                              ObjectKind::Type);
  for (int I = 0; I < N; ++I) {
    TensorSpec Spec;
    Spec.PyType = TypeId;
    Spec.DispatchKeys = Keys;
    Spec.DType = static_cast<int8_t>(DType);
    Spec.DeviceIndex = T0.device().index();
    Spec.RequiresGrad = RequiresGrad;
    Spec.Sizes.assign(Sizes.begin(), Sizes.end());
    Spec.Strides.assign(Strides.begin(), Strides.end());
    Guard &G = SB.guard(GuardKind::TensorMatch, {SB.item(TV, I)});
    G.Tensor = SB.set().addTensorSpec(std::move(Spec));
  }
  registerCase(Name, SB, FL, [=](PyObject *L) {
    PyObject *const *Items = tupleItems(L);
    LocalState S;
    gj_rt_read_local_state(&S);
    for (int I = 0; I < N; ++I) {
      if (Py_TYPE(Items[I]) != Type)
        return 0;
      const at::Tensor &T = THPVariable_Unpack(Items[I]);
      if (((T.key_set().raw_repr() | S.Included) & ~S.Excluded) != Keys ||
          T.scalar_type() != DType || T.device().index() != -1 ||
          T.requires_grad() != RequiresGrad)
        return 0;
      c10::IntArrayRef Sz = T.sizes(), St = T.strides();
      if (Sz.size() != 2 || Sz[0] != Sizes[0] || Sz[1] != Sizes[1] ||
          St[0] != Strides[0] || St[1] != Strides[1])
        return 0;
    }
    return 1;
  });
}

void moduleNoHasAttr() {
  PyObject *FL = eval("{'t': tuple(torch.nn.Linear(2, 2) for i in range(" +
                      std::to_string(N) + "))}");
  SetBuilder SB;
  ValueId T = SB.local("t");
  ObjectId Name = SB.str("num_key_value_groups");
  for (int I = 0; I < N; ++I)
    SB.guard(GuardKind::NoHasAttr, {SB.item(T, I)}, Name);
  PyObject *NameObj =
      reinterpret_cast<PyObject *>(SB.set().objects()[Name].Address);
  // The floor: what proves absence without running nn.Module.__getattr__ --
  // the class lookup, the instance dict and the three dicts __getattr__
  // searches (_parameters, _buffers, _modules).
  static PyObject *Subdicts[3] = {PyUnicode_InternFromString("_parameters"),
                                  PyUnicode_InternFromString("_buffers"),
                                  PyUnicode_InternFromString("_modules")};
  registerCase("NO_HASATTR.nn_Module", SB, FL, [NameObj](PyObject *L) {
    PyObject *const *It = tupleItems(L);
    for (int I = 0; I < N; ++I) {
      if (_PyType_Lookup(Py_TYPE(It[I]), NameObj))
        return 0;
      PyObject **DictPtr = _PyObject_GetDictPtr(It[I]);
      if (!DictPtr || !*DictPtr || PyDict_GetItem(*DictPtr, NameObj))
        return 0;
      for (PyObject *Sub : Subdicts) {
        PyObject *D = PyDict_GetItem(*DictPtr, Sub);
        if (D && PyDict_GetItem(D, NameObj))
          return 0;
      }
    }
    return 1;
  });
}

} // namespace

void registerTensorBenchmarks() {
  tensorMatch("TENSOR_MATCH.tensor", "torch.zeros(4, 8)");
  tensorMatch("TENSOR_MATCH.parameter",
              "torch.nn.Parameter(torch.zeros(4, 8))");
  // The other autograd and layout cases of the inline check (LowerTensors):
  // a leaf requiring grad (a plain AutogradMeta), a non-leaf (grad_fn_
  // only) and a transposed view (a view's DifferentiableViewMeta goes to the
  // helper).
  tensorMatch("TENSOR_MATCH.requires_grad",
              "torch.zeros(4, 8, requires_grad=True)");
  tensorMatch("TENSOR_MATCH.grad_fn",
              "torch.zeros(4, 8, requires_grad=True) * 2");
  tensorMatch("TENSOR_MATCH.view", "torch.zeros(8, 4).t()");
  moduleNoHasAttr();
}

} // namespace guardjit::bench

//===- TensorInlineTest.cpp - Inline TENSOR_MATCH over a synthetic layout -===//
//
// The JIT's inline TENSOR_MATCH (LowerTensors.cpp) reads whatever the
// installed TensorLayout describes. Here the layout describes a fake
// "TensorImpl" this file owns, so every branch of the generated code can be
// driven without torch: each field mismatch, the LocalState masks, inline
// and heap dims, dynamic dims, the autograd cases, and every condition that
// must send the tensor to the helper. The helper (fakeTensorMatch) is the
// reference: the native answer must equal it on every state, at every
// level, and the helper must be called exactly for the states outside the
// inline region (counted).
//
//===----------------------------------------------------------------------===//
#include "JITTestSupport.h"

#include "guardjit/JIT/Engine.h"
#include "guardjit/Runtime/Interpreter.h"
#include "guardjit/Runtime/TorchHooks.h"

#include "llvm/Support/Error.h"

#include <cstddef>
#include <new>
#include <vector>

using namespace guardjit;
using namespace guardjit::test;

namespace {

constexpr uint64_t PlainVTable = 0x1234;
constexpr uint64_t ViewVTable = 0x5678;
constexpr uint64_t HelperKey = uint64_t(1) << 40;
constexpr uint64_t IncludedKey = uint64_t(1) << 3;
constexpr uint64_t ExcludedKey = uint64_t(1) << 5;

struct FakeImpl;

/// A plain meta, or a view meta (ViewVTable) with its backward view.
struct FakeMeta {
  uint64_t VTable = PlainVTable;
  void *GradFn = nullptr;
  uint8_t RequiresGrad = 0;
  uint8_t Engaged = 0;
  FakeImpl *Base = nullptr;
};

struct FakeImpl {
  FakeMeta *Meta = nullptr;
  uint64_t NDim = 0;
  union {
    int64_t Inline[10];
    int64_t *Heap;
  } Storage{};
  uint64_t Keys = 0;
  uint16_t DType = 6;
  int8_t DeviceType = 0;
  int8_t DeviceIndex = -1;
  uint8_t Engaged = 1;
  uint8_t Policy = 0;
  uint8_t LayoutPolicy = 0;
  std::vector<int64_t> HeapStore;

  void setDims(const std::vector<int64_t> &Sizes,
               const std::vector<int64_t> &Strides) {
    NDim = Sizes.size();
    if (NDim <= 5) {
      for (size_t I = 0; I < NDim; ++I) {
        Storage.Inline[I] = Sizes[I];
        Storage.Inline[5 + I] = Strides[I];
      }
      return;
    }
    HeapStore = Sizes;
    HeapStore.insert(HeapStore.end(), Strides.begin(), Strides.end());
    Storage.Heap = HeapStore.data();
  }
  std::vector<int64_t> sizes() const {
    const int64_t *S = NDim <= 5 ? Storage.Inline : Storage.Heap;
    return {S, S + NDim};
  }
  std::vector<int64_t> strides() const {
    const int64_t *S = NDim <= 5 ? Storage.Inline + 5 : Storage.Heap + NDim;
    return {S, S + NDim};
  }
};

struct FakeTensorObject {
  PyObject_HEAD
  FakeImpl *Impl;
};

TensorLayout fakeLayout() {
  TensorLayout L;
  L.Verified = 1;
  L.Impl = offsetof(FakeTensorObject, Impl);
  L.KeySet = offsetof(FakeImpl, Keys);
  L.DType = offsetof(FakeImpl, DType);
  L.DeviceIndex = offsetof(FakeImpl, DeviceIndex);
  L.DeviceEngaged = offsetof(FakeImpl, Engaged);
  L.Policy = offsetof(FakeImpl, Policy);
  L.PolicyMask = 0x9c;
  L.LayoutPolicy = offsetof(FakeImpl, LayoutPolicy);
  L.LayoutPolicyMask = 1;
  L.SizesAndStrides = offsetof(FakeImpl, NDim);
  L.InlineDims = 5;
  L.AutogradMeta = offsetof(FakeImpl, Meta);
  L.AutogradMetaVTable = PlainVTable;
  L.RequiresGrad = offsetof(FakeMeta, RequiresGrad);
  L.GradFn = offsetof(FakeMeta, GradFn);
  L.ViewMetaVTable = ViewVTable;
  L.ViewEngaged = offsetof(FakeMeta, Engaged);
  L.ViewBase = offsetof(FakeMeta, Base);
  L.HelperKeys = HelperKey;
  L.NumScalarTypes = 40;
  L.Status = "verified";
  return L;
}
static_assert(offsetof(FakeImpl, Storage) == offsetof(FakeImpl, NDim) + 8);

/// The payload the JIT reads the plain vtable from; the reference helper
/// reads the spec.
struct alignas(64) FakePayload {
  const TensorSpec *Spec;
  PyTypeObject *Type;
  uint64_t Unused[2];
  uint64_t VTable;
  uint64_t ViewVTable;
};
static_assert(offsetof(FakePayload, VTable) ==
              TensorLayout::PayloadAutogradMetaVTable);
static_assert(offsetof(FakePayload, ViewVTable) ==
              TensorLayout::PayloadViewMetaVTable);

int HelperCalls = 0;

void fakeReadLocalState(LocalState *S) {
  S->Included = IncludedKey;
  S->Excluded = ExcludedKey;
}

/// The reference: TensorCheck::check over the fake fields. A tensor with a
/// custom sizes policy answers from its "custom" sizes, which this fake
/// makes always equal to the expected ones: an inline path that read the
/// stored sizes of such a tensor would disagree.
int fakeTensorMatch(PyObject *V, const void *Payload, const LocalState *S) {
  ++HelperCalls;
  const auto &P = *static_cast<const FakePayload *>(Payload);
  if (Py_TYPE(V) != P.Type)
    return 0;
  const FakeImpl &I = *reinterpret_cast<FakeTensorObject *>(V)->Impl;
  const TensorSpec &Spec = *P.Spec;
  // Another meta class (neither plain nor view) answers "requires grad";
  // so does a view whose base has one.
  auto Plain = [](const FakeMeta *M) {
    return M->VTable == PlainVTable ? M->RequiresGrad || M->GradFn : true;
  };
  bool RequiresGrad = false;
  if (I.Meta && I.Meta->VTable == ViewVTable)
    RequiresGrad = I.Meta->RequiresGrad || I.Meta->GradFn ||
                   (I.Meta->Engaged && I.Meta->Base->Meta &&
                    Plain(I.Meta->Base->Meta));
  else if (I.Meta)
    RequiresGrad = Plain(I.Meta);
  if (((I.Keys | S->Included) & ~S->Excluded) != Spec.DispatchKeys ||
      I.DType != uint16_t(Spec.DType) || I.DeviceIndex != Spec.DeviceIndex ||
      RequiresGrad != Spec.RequiresGrad)
    return 0;
  if (I.Policy & 0x0c)
    return 1; // custom sizes: "equal"
  if (I.NDim != Spec.Sizes.size())
    return 0;
  std::vector<int64_t> Sz = I.sizes(), St = I.strides();
  for (size_t D = 0; D < I.NDim; ++D)
    if ((Spec.Sizes[D] && *Spec.Sizes[D] != Sz[D]) ||
        (Spec.Strides[D] && *Spec.Strides[D] != St[D]))
      return 0;
  return 1;
}

void *fakePrepare(const GuardSet &Set, const Guard &G, PyObject *const *Objects,
                  std::string *) {
  const TensorSpec &Spec = Set.tensorSpec(G.Tensor);
  return new FakePayload{
      &Spec, reinterpret_cast<PyTypeObject *>(Objects[Spec.PyType]), {0, 0},
      PlainVTable, ViewVTable};
}
void fakeRelease(const Guard &, void *P) {
  delete static_cast<FakePayload *>(P);
}

const TensorLayout Layout = fakeLayout();
TorchHooks Hooks = {fakeReadLocalState, fakeTensorMatch, nullptr, nullptr,
                    fakePrepare,        fakeRelease,     nullptr, nullptr,
                    nullptr,            nullptr,         nullptr, &Layout};

PyTypeObject *fakeTensorType(const char *Name) {
  static PyType_Slot Slots[] = {{0, nullptr}};
  PyType_Spec Spec = {Name, sizeof(FakeTensorObject), 0, Py_TPFLAGS_DEFAULT,
                      Slots};
  return reinterpret_cast<PyTypeObject *>(PyType_FromSpec(&Spec));
}

struct State {
  const char *Name;
  bool Helper; ///< outside the inline region
  void (*Mutate)(FakeImpl &I, FakeMeta &M);
};

class TensorInlineTest : public ::testing::TestWithParam<OptLevel> {
protected:
  void SetUp() override {
    if (!Py_IsInitialized())
      Py_InitializeEx(0);
    setTorchHooks(&Hooks);
  }
  void TearDown() override { setTorchHooks(nullptr); }
};

TEST_P(TensorInlineTest, AgreesWithTheHelperAndCallsItOutsideTheRegion) {
  PyTypeObject *Type = fakeTensorType("fake.Tensor");
  PyTypeObject *Other = fakeTensorType("fake.Parameter");
  ASSERT_TRUE(Type && Other);
  // Two tensors: 2 dims (inline storage, dim 1's size dynamic) and 6 dims
  // (heap storage).
  std::vector<int64_t> Sizes2 = {4, 8}, Strides2 = {8, 1};
  std::vector<int64_t> Sizes6 = {1, 2, 3, 2, 1, 2};
  std::vector<int64_t> Strides6 = {24, 12, 4, 2, 2, 1};
  uint64_t Keys = (uint64_t(1) << 1) | IncludedKey;

  SetBuilder SB;
  ValueId A = SB.local("a"), B = SB.local("b");
  for (auto [V, Sz, St] : {std::tuple{A, &Sizes2, &Strides2},
                           std::tuple{B, &Sizes6, &Strides6}}) {
    SB.tensorGuard(V, reinterpret_cast<PyObject *>(Type), 0);
    TensorSpec &Spec = SB.S->tensorSpecs().back();
    Spec.DispatchKeys = Keys;
    Spec.DType = 6;
    Spec.DeviceIndex = -1;
    Spec.RequiresGrad = V == B;
    Spec.Sizes.assign(Sz->begin(), Sz->end());
    Spec.Strides.assign(St->begin(), St->end());
  }
  SB.S->tensorSpecs()[0].Sizes[1] = std::nullopt;
  auto BS = SB.bind();
  ASSERT_TRUE(BS);
  auto J = GuardJIT::create({GetParam(), /*VerifyIR=*/true});
  ASSERT_TRUE(!!J) << llvm::toString(J.takeError());
  auto Compiled = (*J)->compile(*BS);
  ASSERT_TRUE(!!Compiled) << llvm::toString(Compiled.takeError());
  EXPECT_GE((*Compiled)->stats().NumInlined, 2u);
  CheckFn Fn = (*Compiled)->function();

  using I_ = FakeImpl;
  using M_ = FakeMeta;
  const State States[] = {
      {"recorded", false, [](I_ &, M_ &) {}},
      {"included key present", false,
       [](I_ &I, M_ &) { I.Keys |= IncludedKey; }},
      {"excluded key present", false,
       [](I_ &I, M_ &) { I.Keys |= ExcludedKey; }},
      {"other key", false, [](I_ &I, M_ &) { I.Keys |= 1u << 9; }},
      {"dtype", false, [](I_ &I, M_ &) { I.DType = 7; }},
      {"device index", false, [](I_ &I, M_ &) { I.DeviceIndex = 0; }},
      {"device type only", false, [](I_ &I, M_ &) { I.DeviceType = 1; }},
      {"fewer dims", false, [](I_ &I, M_ &) { I.setDims({4}, {1}); }},
      {"6 dims", false,
       [](I_ &I, M_ &) {
         I.setDims({1, 2, 3, 2, 1, 2}, {24, 12, 4, 2, 2, 1});
       }},
      {"2 dims", false, [](I_ &I, M_ &) { I.setDims({4, 8}, {8, 1}); }},
      {"dynamic size changed", false,
       [](I_ &I, M_ &) {
         if (I.NDim == 2)
           I.setDims({4, 9}, {8, 1});
       }},
      {"size 0 changed", false,
       [](I_ &I, M_ &) {
         auto S = I.sizes(), T = I.strides();
         S[0] += 1;
         I.setDims(S, T);
       }},
      {"last stride changed", false,
       [](I_ &I, M_ &) {
         auto S = I.sizes(), T = I.strides();
         T.back() = 2;
         I.setDims(S, T);
       }},
      {"meta, no grad", false, [](I_ &I, M_ &M) { I.Meta = &M; }},
      {"requires_grad_", false,
       [](I_ &I, M_ &M) {
         I.Meta = &M;
         M.RequiresGrad = 1;
       }},
      {"grad_fn", false,
       [](I_ &I, M_ &M) {
         I.Meta = &M;
         M.GradFn = &M;
       }},
      {"other meta class", true,
       [](I_ &I, M_ &M) {
         I.Meta = &M;
         M.VTable = 0x99;
       }},
      {"view, own requires_grad_", false,
       [](I_ &I, M_ &M) {
         I.Meta = &M;
         M.VTable = ViewVTable;
         M.RequiresGrad = 1;
       }},
      {"view, no backward view", false,
       [](I_ &I, M_ &M) {
         I.Meta = &M;
         M.VTable = ViewVTable;
         M.RequiresGrad = 0;
       }},
      {"view of a base without meta", false,
       [](I_ &I, M_ &M) {
         static FakeImpl Base;
         I.Meta = &M;
         M.VTable = ViewVTable;
         M.RequiresGrad = 0; // b's meta starts requiring grad
         M.Engaged = 1;
         M.Base = &Base;
       }},
      {"view of a base requiring grad", false,
       [](I_ &I, M_ &M) {
         static FakeImpl Base;
         static FakeMeta BaseMeta;
         BaseMeta.RequiresGrad = 1;
         Base.Meta = &BaseMeta;
         I.Meta = &M;
         M.VTable = ViewVTable;
         M.RequiresGrad = 0; // b's meta starts requiring grad
         M.Engaged = 1;
         M.Base = &Base;
       }},
      {"view of a base not requiring grad", false,
       [](I_ &I, M_ &M) {
         static FakeImpl Base;
         static FakeMeta BaseMeta;
         Base.Meta = &BaseMeta;
         I.Meta = &M;
         M.VTable = ViewVTable;
         M.RequiresGrad = 0; // b's meta starts requiring grad
         M.Engaged = 1;
         M.Base = &Base;
       }},
      {"view of a base with another meta class", true,
       [](I_ &I, M_ &M) {
         static FakeImpl Base;
         static FakeMeta BaseMeta;
         BaseMeta.VTable = 0x99;
         Base.Meta = &BaseMeta;
         I.Meta = &M;
         M.VTable = ViewVTable;
         M.RequiresGrad = 0; // b's meta starts requiring grad
         M.Engaged = 1;
         M.Base = &Base;
       }},
      {"custom sizes", true, [](I_ &I, M_ &) { I.Policy = 0x08; }},
      {"custom sizes, sizes differ", true,
       [](I_ &I, M_ &) {
         I.Policy = 0x08;
         I.setDims({7}, {1});
       }},
      {"custom strides", true, [](I_ &I, M_ &) { I.Policy = 0x04; }},
      {"symbolic", true, [](I_ &I, M_ &) { I.Policy = 0x10; }},
      {"custom device", true, [](I_ &I, M_ &) { I.Policy = 0x80; }},
      {"unrelated bit-field", false, [](I_ &I, M_ &) { I.Policy = 0x63; }},
      {"custom layout", true, [](I_ &I, M_ &) { I.LayoutPolicy = 1; }},
      {"no device", true, [](I_ &I, M_ &) { I.Engaged = 0; }},
      {"helper key", true, [](I_ &I, M_ &) { I.Keys |= HelperKey; }},
  };

  int Passed = 0, Failed = 0;
  for (const State &St : States) {
    for (int Which = 0; Which < 2; ++Which) {
      SCOPED_TRACE(std::string(St.Name) + (Which ? " on b" : " on a"));
      FakeImpl IA, IB;
      FakeMeta MA, MB;
      IA.Keys = IB.Keys = Keys & ~IncludedKey;
      IA.setDims(Sizes2, Strides2);
      IB.setDims(Sizes6, Strides6);
      IB.Meta = &MB;
      MB.RequiresGrad = 1;
      St.Mutate(Which ? IB : IA, Which ? MB : MA);
      auto Make = [](PyTypeObject *T, FakeImpl *I) {
        PyObject *O = PyType_GenericAlloc(T, 0);
        reinterpret_cast<FakeTensorObject *>(O)->Impl = I;
        return Ref(O);
      };
      Ref OA = Make(Type, &IA), OB = Make(Type, &IB);
      Ref L(Py_BuildValue("{sOsO}", "a", OA.get(), "b", OB.get()));
      HelperCalls = 0;
      int Native = Fn(L.get());
      int NativeCalls = HelperCalls;
      HelperCalls = 0;
      int Interp = interpret(*BS, L.get());
      EXPECT_EQ(Native, Interp);
      EXPECT_FALSE(PyErr_Occurred());
      // The unchanged tensor never needs the helper; the changed one needs
      // it exactly when it is outside the region (a recorded `a` passes, so
      // a changed `b` is always reached).
      EXPECT_EQ(NativeCalls, St.Helper ? 1 : 0);
      (Native ? Passed : Failed) += 1;
    }
  }
  EXPECT_GT(Passed, 10);
  EXPECT_GT(Failed, 10);

  // The exact type comes first: another type fails without the helper.
  FakeImpl IA, IB;
  IA.Keys = IB.Keys = Keys & ~IncludedKey;
  IA.setDims(Sizes2, Strides2);
  IB.setDims(Sizes6, Strides6);
  FakeMeta MB;
  MB.RequiresGrad = 1;
  IB.Meta = &MB;
  PyObject *OA = PyType_GenericAlloc(Other, 0);
  reinterpret_cast<FakeTensorObject *>(OA)->Impl = &IA;
  PyObject *OB = PyType_GenericAlloc(Type, 0);
  reinterpret_cast<FakeTensorObject *>(OB)->Impl = &IB;
  Ref L(Py_BuildValue("{sNsN}", "a", OA, "b", OB));
  HelperCalls = 0;
  EXPECT_EQ(Fn(L.get()), 0);
  EXPECT_EQ(HelperCalls, 0);
  Py_DECREF(Type);
  Py_DECREF(Other);
}

TEST_P(TensorInlineTest, AnUnverifiedLayoutCallsTheHelper) {
  TensorLayout Unverified = fakeLayout();
  Unverified.Verified = 0;
  TorchHooks H = Hooks;
  H.tensorLayout = &Unverified;
  setTorchHooks(&H);
  PyTypeObject *Type = fakeTensorType("fake.Tensor");
  SetBuilder SB;
  SB.tensorGuard(SB.local("a"), reinterpret_cast<PyObject *>(Type), 0);
  SB.S->tensorSpecs().back().DispatchKeys = IncludedKey;
  SB.S->tensorSpecs().back().DType = 6;
  auto BS = SB.bind();
  ASSERT_TRUE(BS);
  auto J = GuardJIT::create({GetParam(), /*VerifyIR=*/true});
  ASSERT_TRUE(!!J) << llvm::toString(J.takeError());
  auto Compiled = (*J)->compile(*BS);
  ASSERT_TRUE(!!Compiled) << llvm::toString(Compiled.takeError());
  FakeImpl I;
  PyObject *O = PyType_GenericAlloc(Type, 0);
  reinterpret_cast<FakeTensorObject *>(O)->Impl = &I;
  Ref L(Py_BuildValue("{sN}", "a", O));
  HelperCalls = 0;
  EXPECT_EQ((*Compiled)->function()(L.get()), 1);
  EXPECT_EQ(HelperCalls, 1);
  setTorchHooks(&Hooks);
  Py_DECREF(Type);
}

INSTANTIATE_TEST_SUITE_P(AllLevels, TensorInlineTest,
                         ::testing::Values(OptLevel::O0, OptLevel::Light,
                                           OptLevel::O1, OptLevel::O2));

} // namespace

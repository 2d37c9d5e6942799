//===- Torch213KindsTest.cpp - Interpreter on the torch 2.13 kinds --------===//
//
// The interpreter's answers on the shared cases of Torch213Cases.h (pass and
// fail for every kind, no Python error left set), what bind() rejects, and
// the CPython 3.11 iterator layouts the helpers read, checked on live
// objects.
//
//===----------------------------------------------------------------------===//
#include "../Common/Torch213Cases.h"

#include "guardjit/Runtime/CPythonABI.h"
#include "guardjit/Runtime/Interpreter.h"
#include "guardjit/Runtime/RuntimeHelpers.h"

using namespace guardjit;
using namespace guardjit::torch213;

namespace {

class Torch213Interpreter : public ::testing::TestWithParam<Case> {
protected:
  void SetUp() override {
    if (!Py_IsInitialized())
      Py_InitializeEx(0);
    prelude();
    setTorchHooks(&fakeHooks());
  }
  void TearDown() override { setTorchHooks(nullptr); }
};

TEST_P(Torch213Interpreter, ExpectedAnswers) {
  const Case &C = GetParam();
  Builder B;
  C.Build(B);
  std::string Error;
  auto BS = BoundGuardSet::bind(B.S, &Error);
  ASSERT_TRUE(BS) << Error;
  for (const Probe &P : C.Probes) {
    SCOPED_TRACE(P.Before + " | " + P.Locals);
    prepareProbe(P);
    PyObject *L = evalNew(P.Locals);
    ASSERT_NE(L, nullptr);
    EXPECT_EQ(interpret(*BS, L), P.Expected);
    EXPECT_FALSE(PyErr_Occurred()) << "interpret left an error set";
    PyErr_Clear();
    Py_DECREF(L);
  }
}

INSTANTIATE_TEST_SUITE_P(Kinds, Torch213Interpreter,
                         ::testing::ValuesIn(cases()),
                         [](const auto &Info) { return Info.param.Name; });

class Torch213Runtime : public ::testing::Test {
protected:
  void SetUp() override {
    if (!Py_IsInitialized())
      Py_InitializeEx(0);
    prelude();
  }
};

TEST_F(Torch213Runtime, TupleIteratorLayout) {
  PyObject *It = evalNew("advanced(iter((1, 2, 3)), 1)");
  ASSERT_EQ(Py_TYPE(It), &PyTupleIter_Type);
  auto *L = reinterpret_cast<guardjit::abi::TupleIterLayout *>(It);
  EXPECT_EQ(L->it_index, 1);
  ASSERT_NE(L->it_seq, nullptr);
  EXPECT_EQ(PyTuple_GET_SIZE(L->it_seq), 3);
  Py_DECREF(It);
  It = evalNew("advanced(iter((1,)), 1)");
  PyObject *Dummy = evalNew("next(iter(()), None)");
  Py_DECREF(Dummy);
  // Exhaustion is seen by the next call to next(), which drops it_seq.
  execPrelude("ex = iter((1,)); next(ex); next(ex, None)");
  PyObject *Ex = evalNew("ex");
  EXPECT_EQ(reinterpret_cast<guardjit::abi::TupleIterLayout *>(Ex)->it_seq, nullptr);
  Py_DECREF(Ex);
  Py_DECREF(It);
}

TEST_F(Torch213Runtime, RangeIteratorLayout) {
  PyObject *It = evalNew("advanced(iter(range(5, 20, 3)), 2)");
  ASSERT_EQ(Py_TYPE(It), &PyRangeIter_Type);
  auto *L = reinterpret_cast<guardjit::abi::RangeIterLayout *>(It);
  EXPECT_EQ(L->start, 5);
  EXPECT_EQ(L->step, 3);
  EXPECT_EQ(L->index, 2);
  EXPECT_EQ(L->len, 5);
  // torch's normalisation: start + index * step, start + len * step.
  PyObject *T = PyDict_GetItemString(prelude(), "range_iterator");
  EXPECT_TRUE(gj_rt_range_iterator_match(It, T, 11, 20, 3));
  EXPECT_FALSE(gj_rt_range_iterator_match(It, T, 5, 20, 3));
  Py_DECREF(It);
}

TEST_F(Torch213Runtime, NegativeStepRange) {
  PyObject *It = evalNew("advanced(iter(range(10, 0, -3)), 1)");
  PyObject *T = PyDict_GetItemString(prelude(), "range_iterator");
  // range(10, 0, -3) has len 4: stop normalises to 10 + 4 * -3 = -2.
  EXPECT_TRUE(gj_rt_range_iterator_match(It, T, 7, -2, -3));
  Py_DECREF(It);
}

TEST_F(Torch213Runtime, BindRejectsWrongIteratorTypes) {
  {
    Builder B;
    B.guard(GuardKind::TupleIteratorLen, {B.local("it")},
            B.object("list", ObjectKind::Type), 1);
    std::string Error;
    EXPECT_FALSE(BoundGuardSet::bind(B.S, &Error));
    EXPECT_NE(Error.find("tuple_iterator"), std::string::npos) << Error;
  }
  {
    Builder B;
    Guard &G = B.guard(GuardKind::RangeIteratorMatch, {B.local("it")},
                       B.object("range_iterator", ObjectKind::Type));
    G.Ints = {0, 1};
    std::string Error;
    EXPECT_FALSE(BoundGuardSet::bind(B.S, &Error));
    EXPECT_NE(Error.find("ints"), std::string::npos) << Error;
  }
  {
    Builder B;
    B.guard(GuardKind::StorageOverlapping, {B.local("a")}, InvalidId, 2);
    std::string Error;
    EXPECT_FALSE(BoundGuardSet::bind(B.S, &Error));
    EXPECT_NE(Error.find("overlapping"), std::string::npos) << Error;
  }
  {
    Builder B;
    B.guard(GuardKind::ObjectAliasing, {B.local("a")});
    std::string Error;
    EXPECT_FALSE(BoundGuardSet::bind(B.S, &Error));
    EXPECT_NE(Error.find("2 operand"), std::string::npos) << Error;
  }
}

TEST_F(Torch213Runtime, DispatchKeySetNeedsLocalState) {
  Builder B;
  B.guard(GuardKind::DispatchKeySetMatch, {B.local("k")},
          B.object("FakeDKS", ObjectKind::Type), 1);
  std::string Error;
  auto BS = BoundGuardSet::bind(B.S, &Error);
  ASSERT_TRUE(BS) << Error;
  EXPECT_TRUE(BS->needsLocalState());
}

TEST_F(Torch213Runtime, TorchAccessorsFailWithoutHooks) {
  setTorchHooks(nullptr);
  PyObject *T = evalNew("FakeTensor(None)");
  EXPECT_EQ(gj_rt_grad(T), nullptr);
  PyObject *const Ts[] = {T};
  EXPECT_EQ(gj_rt_storage_overlapping(Ts, 1, 0), 0);
  EXPECT_FALSE(PyErr_Occurred());
  Py_DECREF(T);
}

TEST_F(Torch213Runtime, NewReferenceAccessors) {
  EXPECT_TRUE(accessorReturnsNewRef(AccessorKind::Grad));
  EXPECT_TRUE(accessorReturnsNewRef(AccessorKind::SetGetItem));
  EXPECT_FALSE(accessorReturnsNewRef(AccessorKind::TupleIteratorGetItem));
  // The set item outlives the temporary list: the caller owns a reference.
  PyObject *S = evalNew("{obj}");
  PyObject *Obj = PyDict_GetItemString(prelude(), "obj");
  Py_ssize_t Before = Py_REFCNT(Obj);
  PyObject *X = gj_rt_set_get_item(S, 0);
  EXPECT_EQ(X, Obj);
  EXPECT_EQ(Py_REFCNT(Obj), Before + 1);
  Py_DECREF(X);
  Py_DECREF(S);
}

} // namespace

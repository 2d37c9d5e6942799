//===- Torch214KindsTest.cpp - Interpreter on the torch 2.14 kinds --------===//
//
// The interpreter's answers on the shared cases of Torch214Cases.h
// (cow_tensor_match, contextvar_get: pass and fail, no Python error left
// set), what bind() rejects, and the new reference contextvar_get returns.
//
//===----------------------------------------------------------------------===//
#include "../Common/Torch214Cases.h"

#include "guardjit/Runtime/Interpreter.h"
#include "guardjit/Runtime/RuntimeHelpers.h"

using namespace guardjit;
using namespace guardjit::torch214;

namespace {

class Torch214Interpreter : public ::testing::TestWithParam<Case> {
protected:
  void SetUp() override {
    if (!Py_IsInitialized())
      Py_InitializeEx(0);
    prelude();
    setTorchHooks(&fakeHooks());
  }
  void TearDown() override { setTorchHooks(nullptr); }
};

TEST_P(Torch214Interpreter, ExpectedAnswers) {
  const Case &C = GetParam();
  Builder B;
  C.Build(B);
  std::string Error;
  auto BS = BoundGuardSet::bind(B.S, &Error);
  ASSERT_TRUE(BS) << Error;
  for (const Probe &P : C.Probes) {
    SCOPED_TRACE(P.Before + " | " + P.Locals);
    applyProbe(P);
    PyObject *L = torch213::evalNew(P.Locals);
    ASSERT_NE(L, nullptr);
    EXPECT_EQ(interpret(*BS, L), P.Expected);
    EXPECT_FALSE(PyErr_Occurred()) << "interpret left an error set";
    PyErr_Clear();
    Py_DECREF(L);
  }
}

INSTANTIATE_TEST_SUITE_P(Kinds, Torch214Interpreter,
                         ::testing::ValuesIn(cases()),
                         [](const auto &Info) { return Info.param.Name; });

class Torch214Runtime : public ::testing::Test {
protected:
  void SetUp() override {
    if (!Py_IsInitialized())
      Py_InitializeEx(0);
    prelude();
  }
};

TEST_F(Torch214Runtime, BindRejectsBadPayloads) {
  {
    Builder B;
    B.guard(GuardKind::CowTensorMatch, {B.local("t")}, InvalidId, 2);
    std::string Error;
    EXPECT_FALSE(BoundGuardSet::bind(B.S, &Error));
    EXPECT_NE(Error.find("int=0 or int=1"), std::string::npos) << Error;
  }
  {
    Builder B;
    ValueId V = contextVarGet(B, B.local("v"));
    B.S->values()[V].Key = 99;
    B.guard(GuardKind::NotNone, {V});
    std::string Error;
    EXPECT_FALSE(BoundGuardSet::bind(B.S, &Error));
    EXPECT_NE(Error.find("default"), std::string::npos) << Error;
  }
}

TEST_F(Torch214Runtime, CowFailsWithoutTheHook) {
  setTorchHooks(&torch213::fakeHooks()); // a table without cowTensorMatch
  PyObject *T = torch213::evalNew("CowTensor(cow=True)");
  EXPECT_EQ(gj_rt_cow_tensor_match(T, 1), 0);
  setTorchHooks(nullptr);
  EXPECT_EQ(gj_rt_cow_tensor_match(T, 1), 0);
  EXPECT_FALSE(PyErr_Occurred());
  Py_DECREF(T);
}

TEST_F(Torch214Runtime, ContextVarGetReturnsANewReference) {
  EXPECT_TRUE(accessorReturnsNewRef(AccessorKind::ContextVarGet));
  EXPECT_FALSE(accessorReadsKey(AccessorKind::ContextVarGet)); // optional
  torch213::execPrelude("cv_obj = object(); _tok = cv.set(cv_obj)");
  PyObject *Var = PyDict_GetItemString(prelude(), "cv");
  PyObject *Obj = PyDict_GetItemString(prelude(), "cv_obj");
  Py_ssize_t Before = Py_REFCNT(Obj);
  PyObject *X = gj_rt_contextvar_get(Var, nullptr);
  EXPECT_EQ(X, Obj);
  EXPECT_EQ(Py_REFCNT(Obj), Before + 1);
  Py_XDECREF(X);
  // Unset with a default: the default, as a new reference too.
  PyObject *Unset = PyDict_GetItemString(prelude(), "cv_unset");
  Before = Py_REFCNT(Obj);
  X = gj_rt_contextvar_get(Unset, Obj);
  EXPECT_EQ(X, Obj);
  EXPECT_EQ(Py_REFCNT(Obj), Before + 1);
  Py_XDECREF(X);
  // Unset, no default: no value and no error (the lambda's LookupError).
  EXPECT_EQ(gj_rt_contextvar_get(Unset, nullptr), nullptr);
  EXPECT_FALSE(PyErr_Occurred());
  torch213::execPrelude("cv.reset(_tok)");
}

TEST_F(Torch214Runtime, InterpreterReleasesContextVarReads) {
  // The interpreter owns each read until the check ends: after a pass and
  // after a failure the value's count is back where it was.
  setTorchHooks(&fakeHooks());
  torch213::execPrelude("cv_marker = object(); cv_marker2 = object(); "
                        "_tok2 = cv.set(cv_marker)");
  Builder B;
  ValueId V = contextVarGet(B, B.local("v"));
  B.guard(GuardKind::NotNone, {V});
  B.guard(GuardKind::IdMatch, {V}, B.object("cv_marker"));
  std::string Error;
  auto BS = BoundGuardSet::bind(B.S, &Error);
  ASSERT_TRUE(BS) << Error;
  PyObject *Marker = PyDict_GetItemString(prelude(), "cv_marker");
  PyObject *L = torch213::evalNew("{'v': cv}");
  Py_ssize_t Before = Py_REFCNT(Marker);
  EXPECT_TRUE(interpret(*BS, L));
  EXPECT_EQ(Py_REFCNT(Marker), Before);
  torch213::execPrelude("cv.reset(_tok2); _tok2 = cv.set(cv_marker2)");
  PyObject *Other = PyDict_GetItemString(prelude(), "cv_marker2");
  Before = Py_REFCNT(Other);
  EXPECT_FALSE(interpret(*BS, L)); // read, then the ID_MATCH fails
  EXPECT_EQ(Py_REFCNT(Other), Before);
  torch213::execPrelude("cv.reset(_tok2)");
  Py_DECREF(L);
  setTorchHooks(nullptr);
}

} // namespace

//===- Torch214KindsTest.cpp - JIT on the torch 2.14 kinds ----------------===//
//
// Compiles each case of Torch214Cases.h at every optimization level and
// checks the native answer against the expected one and the interpreter's,
// with no Python error left set and every contextvar_get reference released;
// plus the symbolic lowering of both kinds.
//
//===----------------------------------------------------------------------===//
#include "../Common/Torch214Cases.h"

#include "guardjit/JIT/Engine.h"
#include "guardjit/JIT/Lowering.h"
#include "guardjit/Runtime/Interpreter.h"

#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Module.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>

using namespace guardjit;
using namespace guardjit::torch214;

namespace {

struct Param {
  Case C;
  OptLevel Level;
};

class Torch214JIT : public ::testing::TestWithParam<Param> {
protected:
  void SetUp() override {
    if (!Py_IsInitialized())
      Py_InitializeEx(0);
    prelude();
    setTorchHooks(&fakeHooks());
  }
  void TearDown() override { setTorchHooks(nullptr); }
};

TEST_P(Torch214JIT, AgreesWithInterpreterAndExpected) {
  const Case &C = GetParam().C;
  Builder B;
  C.Build(B);
  std::string Error;
  auto BS = BoundGuardSet::bind(B.S, &Error);
  ASSERT_TRUE(BS) << Error;
  auto J = GuardJIT::create({GetParam().Level, /*VerifyIR=*/true});
  ASSERT_TRUE(!!J) << llvm::toString(J.takeError());
  auto Compiled = (*J)->compile(*BS);
  ASSERT_TRUE(!!Compiled) << llvm::toString(Compiled.takeError());
  CheckFn Fn = (*Compiled)->function();
  ASSERT_NE(Fn, nullptr);
  for (const Probe &P : C.Probes) {
    SCOPED_TRACE(P.Before + " | " + P.Locals);
    applyProbe(P);
    PyObject *L = torch213::evalNew(P.Locals);
    ASSERT_NE(L, nullptr);
    bool Interp = interpret(*BS, L);
    EXPECT_FALSE(PyErr_Occurred()) << "interpreter left an error set";
    PyErr_Clear();
    int Native = Fn(L);
    EXPECT_FALSE(PyErr_Occurred()) << "native check left an error set";
    PyErr_Clear();
    EXPECT_EQ(Native == 1, Interp) << "JIT and interpreter disagree";
    EXPECT_EQ(Native == 1, P.Expected);
    Py_DECREF(L);
  }
  Compiled->reset();
  EXPECT_TRUE((*J)->takeReportedErrors().empty());
}

std::vector<Param> params() {
  std::vector<Param> Out;
  for (const Case &C : cases())
    for (OptLevel L : {OptLevel::O0, OptLevel::Light, OptLevel::O2})
      Out.push_back({C, L});
  return Out;
}

INSTANTIATE_TEST_SUITE_P(
    Kinds, Torch214JIT, ::testing::ValuesIn(params()), [](const auto &Info) {
      const char *L = Info.param.Level == OptLevel::O0      ? "O0"
                      : Info.param.Level == OptLevel::Light ? "Light"
                                                            : "O2";
      return Info.param.C.Name + "_" + L;
    });

class Torch214JITRefs : public ::testing::TestWithParam<OptLevel> {
protected:
  void SetUp() override {
    if (!Py_IsInitialized())
      Py_InitializeEx(0);
    prelude();
  }
};

TEST_P(Torch214JITRefs, ContextVarReadsAreReleased) {
  // The read is a new reference held to the end of the check (the frame
  // array at O0, a cleanup block otherwise), on every exit: a pass, a guard
  // failing after it, a failing read.
  Builder B;
  torch213::execPrelude("cv_dflt = object()");
  ValueId V = contextVarGet(B, B.local("v"), "cv_dflt");
  B.guard(GuardKind::NotNone, {V});
  torch213::execPrelude("cv_marker3 = object()");
  B.guard(GuardKind::IdMatch, {V}, B.object("cv_marker3"));
  std::string Error;
  auto BS = BoundGuardSet::bind(B.S, &Error);
  ASSERT_TRUE(BS) << Error;
  auto J = GuardJIT::create({GetParam(), /*VerifyIR=*/true});
  ASSERT_TRUE(!!J) << llvm::toString(J.takeError());
  auto Compiled = (*J)->compile(*BS);
  ASSERT_TRUE(!!Compiled) << llvm::toString(Compiled.takeError());
  CheckFn Fn = (*Compiled)->function();
  PyObject *Marker = PyDict_GetItemString(prelude(), "cv_marker3");
  PyObject *Dflt = PyDict_GetItemString(prelude(), "cv_dflt");
  torch213::execPrelude("_tok3 = cv.set(cv_marker3)");
  PyObject *L = torch213::evalNew("{'v': cv}");
  Py_ssize_t M0 = Py_REFCNT(Marker), D0 = Py_REFCNT(Dflt);
  for (int I = 0; I < 3; ++I)
    EXPECT_EQ(Fn(L), 1);
  EXPECT_EQ(Py_REFCNT(Marker), M0);
  torch213::execPrelude("cv.reset(_tok3)");
  PyObject *U = torch213::evalNew("{'v': cv_unset}"); // reads the default
  for (int I = 0; I < 3; ++I)
    EXPECT_EQ(Fn(U), 0); // the ID_MATCH after the read fails
  EXPECT_EQ(Py_REFCNT(Dflt), D0);
  PyObject *R = torch213::evalNew("{'v': RaisingGetter()}");
  EXPECT_EQ(Fn(R), 0);
  EXPECT_FALSE(PyErr_Occurred());
  Py_DECREF(R);
  Py_DECREF(U);
  Py_DECREF(L);
  Compiled->reset();
}

INSTANTIATE_TEST_SUITE_P(Levels, Torch214JITRefs,
                         ::testing::Values(OptLevel::O0, OptLevel::Light,
                                           OptLevel::O2),
                         [](const auto &Info) {
                           return Info.param == OptLevel::O0      ? "O0"
                                  : Info.param == OptLevel::Light ? "Light"
                                                                  : "O2";
                         });

TEST(Torch214Lowering, SymbolicLoweringCallsTheHelpers) {
  if (!Py_IsInitialized())
    Py_InitializeEx(0);
  prelude();
  std::string Text;
  for (const Case &C : cases()) {
    Builder B;
    C.Build(B);
    llvm::LLVMContext Ctx;
    llvm::Module M("m", Ctx);
    auto F = lowerGuardSetSymbolic(*B.S, M, "check");
    ASSERT_TRUE(!!F) << C.Name << ": " << llvm::toString(F.takeError());
    llvm::raw_string_ostream OS(Text);
    M.print(OS, nullptr);
  }
  EXPECT_NE(Text.find("call i32 @gj_rt_cow_tensor_match(ptr %v1, i64 1)"),
            std::string::npos)
      << Text;
  EXPECT_NE(Text.find("call i32 @gj_rt_cow_tensor_match(ptr %v1, i64 0)"),
            std::string::npos);
  // get() passes no default; get(d) the default's object.
  EXPECT_NE(Text.find("@gj_rt_contextvar_get(ptr %v1, ptr null)"),
            std::string::npos);
  EXPECT_NE(Text.find("@gj_rt_contextvar_get(ptr %v1, ptr @gj.obj."),
            std::string::npos);
}

TEST(Torch214Lowering, RuntimeSymbolsListEveryHelper) {
  std::vector<std::string> Names;
  for (const RuntimeSymbol &S : runtimeSymbols())
    Names.push_back(S.Name);
  for (const char *Helper : {"gj_rt_cow_tensor_match", "gj_rt_contextvar_get"})
    EXPECT_NE(std::find(Names.begin(), Names.end(), Helper), Names.end())
        << Helper;
}

} // namespace

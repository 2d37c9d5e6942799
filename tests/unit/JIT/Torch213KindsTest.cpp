//===- Torch213KindsTest.cpp - JIT on the torch 2.13 kinds ----------------===//
//
// Compiles each case of Torch213Cases.h at every optimization level and
// checks the native answer against the expected one and the interpreter's,
// with no Python error left set; plus the symbolic lowering of every new
// kind (what guard-ir-opt --emit=llvm prints).
//
//===----------------------------------------------------------------------===//
#include "../Common/Torch213Cases.h"

#include "guardjit/JIT/Engine.h"
#include "guardjit/JIT/Lowering.h"
#include "guardjit/Runtime/Interpreter.h"

#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Module.h"
#include "llvm/Support/raw_ostream.h"

using namespace guardjit;
using namespace guardjit::torch213;

namespace {

struct Param {
  Case C;
  OptLevel Level;
};

class Torch213JIT : public ::testing::TestWithParam<Param> {
protected:
  void SetUp() override {
    if (!Py_IsInitialized())
      Py_InitializeEx(0);
    prelude();
    setTorchHooks(&fakeHooks());
  }
  void TearDown() override { setTorchHooks(nullptr); }
};

TEST_P(Torch213JIT, AgreesWithInterpreterAndExpected) {
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
    prepareProbe(P);
    PyObject *L = evalNew(P.Locals);
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
    Kinds, Torch213JIT, ::testing::ValuesIn(params()), [](const auto &Info) {
      const char *L = Info.param.Level == OptLevel::O0      ? "O0"
                      : Info.param.Level == OptLevel::Light ? "Light"
                                                            : "O2";
      return Info.param.C.Name + "_" + L;
    });

TEST(Torch213Lowering, SymbolicLoweringCallsTheHelpers) {
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
  for (const char *Helper :
       {"gj_rt_tuple_iterator_len", "gj_rt_range_iterator_match",
        "gj_rt_mapping_keys_match", "gj_rt_set_contains",
        "gj_rt_dispatch_key_set_match", "gj_rt_dual_level_match",
        "gj_rt_storage_overlapping", "gj_rt_grad", "gj_rt_set_get_item",
        "gj_rt_tuple_iterator_get_item", "gj_rt_read_local_state"})
    EXPECT_NE(Text.find(Helper), std::string::npos) << Helper;
  // OBJECT_ALIASING is one inline compare, no helper.
  EXPECT_NE(Text.find("g0.object_aliasing"), std::string::npos);
}

TEST(Torch213Lowering, RuntimeSymbolsListEveryHelper) {
  std::vector<std::string> Names;
  for (const RuntimeSymbol &S : runtimeSymbols())
    Names.push_back(S.Name);
  for (const char *Helper :
       {"gj_rt_tuple_iterator_len", "gj_rt_range_iterator_match",
        "gj_rt_mapping_keys_match", "gj_rt_set_contains",
        "gj_rt_dispatch_key_set_match", "gj_rt_dual_level_match",
        "gj_rt_storage_overlapping", "gj_rt_grad", "gj_rt_set_get_item",
        "gj_rt_tuple_iterator_get_item"})
    EXPECT_NE(std::find(Names.begin(), Names.end(), Helper), Names.end())
        << Helper;
}

} // namespace

//===- ChunkSplitTest.cpp - A check split into chunk functions ------------===//
//
// LoweringOptions::ChunkSteps cuts a large check into functions of a few
// steps each, called in order from the entry. Cutting must not change an
// answer: one set of reads and guards, compiled at every level with chunks of
// 1, 2, 3 and 7 steps and as one function, against the interpreter on the
// passing input and on inputs that fail each guard in turn, so that the
// failing guard is, for some chunk size, the first of its chunk and, for
// another, the last. The set reads `L['o']` first and its attributes last
// (a value of the first chunk used several chunks later), aliases two early
// locals in the fused block at the end, and reads new references whose
// counts must come back on every path.
//
//===----------------------------------------------------------------------===//
#include "guardjit/JIT/Engine.h"

#include "guardjit/IR/GuardSet.h"
#include "guardjit/Runtime/BoundGuardSet.h"
#include "guardjit/Runtime/Interpreter.h"
#include "guardjit/Runtime/Python.h"

#include "gtest/gtest.h"

#include "EngineTestSupport.h"
#include "JITTestSupport.h"

#include <string>
#include <tuple>

namespace guardjit::test::engine {
namespace {

using llvm::toString;

constexpr int NumLocals = 12;

class ChunkSplitTest
    : public ::testing::TestWithParam<std::tuple<OptLevel, int>> {
protected:
  void SetUp() override {
    prelude();
    JITOptions O;
    O.Level = std::get<0>(GetParam());
    O.VerifyIR = true;
    O.ChunkSteps = std::get<1>(GetParam());
    auto E = GuardJIT::create(O);
    ASSERT_TRUE(!!E) << toString(E.takeError());
    JIT = std::move(*E);
  }
  void TearDown() override {
    Check.reset();
    Bound.reset();
    EXPECT_TRUE(JIT->takeReportedErrors().empty());
  }

  std::unique_ptr<GuardJIT> JIT;
  std::unique_ptr<BoundGuardSet> Bound;
  std::unique_ptr<CompiledCheck> Check;
};

/// The frame locals of the passing input: a0..a11 = 0..11, `o` a C with
/// x = 7.25 and t = (10, 20, 30), `p` and `q` one list.
Ref passingLocals() {
  exec("split_o = C(); split_o.x = float('7.25'); split_shared = []\n"
       "def split_locals():\n"
       "    d = {'a%d' % i: i for i in range(12)}\n"
       "    d.update(o=split_o, p=split_shared, q=split_shared)\n"
       "    return d\n");
  return eval("split_locals()");
}

TEST_P(ChunkSplitTest, AnswersAtEveryChunkBoundary) {
  Ref L = passingLocals();
  Ref X, T;
  Ref CType = eval("C"), Seven = eval("7.25"), Twenty = eval("20");

  SetBuilder SB("split");
  // Value 1, read in the first chunk, and its type guard right after it.
  ValueId O = SB.local("o");
  SB.guard(GuardKind::TypeMatch, {O}, SB.object(CType.get()));
  ValueId P = SB.local("p"), Q = SB.local("q");
  SB.guard(GuardKind::NotNone, {P});
  SB.guard(GuardKind::NotNone, {Q});
  std::vector<Ref> Ints;
  for (int I = 0; I < NumLocals; ++I) {
    Ints.push_back(eval(std::to_string(I).c_str()));
    std::string Name = "a" + std::to_string(I);
    SB.guard(GuardKind::EqualsMatch, {SB.local(Name.c_str())},
             SB.object(Ints.back().get(), ObjectKind::Constant, true));
  }
  // Read last, from `o` of the first chunk: new references (getattr).
  ValueId OX = SB.keyed(AccessorKind::GetAttr, O, "x");
  SB.guard(GuardKind::EqualsMatch, {OX},
           SB.object(Seven.get(), ObjectKind::Constant, true));
  ValueId OT = SB.keyed(AccessorKind::GetAttr, O, "t");
  SB.guard(GuardKind::EqualsMatch,
           {SB.indexed(AccessorKind::TupleGetItem, OT, 1)},
           SB.object(Twenty.get(), ObjectKind::Constant, true));
  // Fused at the very end, over two values of the first chunk.
  SB.guard(GuardKind::ObjectAliasing, {P, Q});

  Bound = SB.bind();
  ASSERT_TRUE(Bound);
  auto C = JIT->compile(*Bound);
  ASSERT_TRUE(!!C) << toString(C.takeError());
  Check = std::move(*C);
  CheckFn Fn = Check->function();
  ASSERT_NE(Fn, nullptr);

  // The layout asked for: several functions, a value reloaded in a later
  // chunk; one function without chunks.
  auto Text = JIT->emitLLVM(*Bound);
  ASSERT_TRUE(!!Text) << toString(Text.takeError());
  size_t NumChunks = 0;
  for (size_t At = Text->find("define internal"); At != std::string::npos;
       At = Text->find("define internal", At + 1))
    ++NumChunks;
  int Steps = std::get<1>(GetParam());
  if (Steps == 0) {
    EXPECT_EQ(NumChunks, 0u);
  } else {
    EXPECT_GE(NumChunks, Steps <= 3 ? 4u : 2u) << *Text;
    EXPECT_NE(Text->find("v1.reload"), std::string::npos)
        << "L['o'] must be passed to a later chunk\n"
        << *Text;
  }

  // The reads' new references come back on every path: the counts of what
  // `o.x` and `o.t` are now, before and after each check.
  auto Run = [&](PyObject *Locals, bool Expected, const std::string &What) {
    SCOPED_TRACE(What);
    X = eval("getattr(split_o, 'x', None)");
    T = eval("getattr(split_o, 't', None)");
    Py_ssize_t XRefs = Py_REFCNT(X.get()), TRefs = Py_REFCNT(T.get());
    EXPECT_EQ(both(*Bound, Fn, Locals), Expected);
    EXPECT_EQ(Py_REFCNT(X.get()), XRefs) << "o.x leaked or over-released";
    EXPECT_EQ(Py_REFCNT(T.get()), TRefs) << "o.t leaked or over-released";
  };
  Run(L.get(), true, "passing");
  Run(L.get(), true, "passing again (memos filled)");
  // Each guard failing alone, in schedule order.
  for (int I = 0; I < NumLocals; ++I) {
    std::string Key = "a" + std::to_string(I);
    Ref Bad = eval("split_locals()");
    Ref Minus = eval("-1");
    PyDict_SetItemString(Bad.get(), Key.c_str(), Minus.get());
    Run(Bad.get(), false, Key + " wrong");
    PyDict_DelItemString(Bad.get(), Key.c_str());
    Run(Bad.get(), false, Key + " missing");
  }
  for (const char *Bad : {"dict(split_locals(), o=C2())",
                          "dict(split_locals(), p=None)",
                          "dict(split_locals(), q=[])"}) {
    Ref Locals = eval(Bad);
    Run(Locals.get(), false, Bad);
  }
  exec("split_o.x = 1.0");
  Run(L.get(), false, "o.x wrong (a late chunk)");
  exec("split_o.x = float('7.25'); split_o.t = (10, 21, 30)");
  Run(L.get(), false, "o.t[1] wrong (the last chunk)");
  exec("del split_o.t");
  Run(L.get(), false, "o.t missing");
  exec("split_o.t = (10, 20, 30)");
  Run(L.get(), true, "passing after the changes");
}

std::string levelAndSteps(
    const ::testing::TestParamInfo<std::tuple<OptLevel, int>> &Info) {
  return std::string(optLevelName(std::get<0>(Info.param))) + "_steps" +
         std::to_string(std::get<1>(Info.param));
}

INSTANTIATE_TEST_SUITE_P(
    LevelsAndChunks, ChunkSplitTest,
    ::testing::Combine(::testing::Values(OptLevel::O0, OptLevel::Light,
                                         OptLevel::O1, OptLevel::O2),
                       ::testing::Values(0, 1, 2, 3, 7)),
    levelAndSteps);

} // namespace
} // namespace guardjit::test::engine

//===- CheckTargetTest.cpp - A check's life with a fake provider ----------===//
//
// lib/Check drives any CodeProvider: here one whose "code" is a fixed C
// function, so each test controls what the native answer is. Probation must
// catch code that disagrees with the interpreter and uninstall it; replaced
// code must live until no call runs it; the background tier must install
// the first level, then the next.
//
//===----------------------------------------------------------------------===//
#include "guardjit/Check/CheckTarget.h"

#include "guardjit/Check/TierUp.h"
#include "guardjit/IR/Parser.h"

#include <gtest/gtest.h>

#include "llvm/Support/Error.h"

using namespace guardjit;

namespace {

class PythonEnvironment : public ::testing::Environment {
public:
  void SetUp() override { Py_InitializeEx(0); }
};
const ::testing::Environment *const Env =
    ::testing::AddGlobalTestEnvironment(new PythonEnvironment);

int alwaysPass(PyObject *) { return 1; }
int alwaysFail(PyObject *) { return 0; }

int Freed = 0; ///< FakeCode objects destroyed

class FakeCode final : public CheckCode {
public:
  FakeCode(CheckFn Fn, int Level) : Fn(Fn), Lvl(Level) {}
  ~FakeCode() override { ++Freed; }
  CheckFn function() const override { return Fn; }
  int level() const override { return Lvl; }
  CodeStats stats() const override { return CodeStats(); }

private:
  CheckFn Fn;
  int Lvl;
};

class FakeProvider final : public CodeProvider {
public:
  FakeProvider(CheckFn Fn, int Level) : Fn(Fn), Lvl(Level) {}
  int level() const override { return Lvl; }
  std::string levelName() const override { return "L" + std::to_string(Lvl); }
  std::shared_ptr<CheckCode> compile(const BoundGuardSet &,
                                     std::string *) override {
    return std::make_shared<FakeCode>(Fn, Lvl);
  }

private:
  CheckFn Fn;
  int Lvl;
};

/// `L['x'] is None`, bound.
std::shared_ptr<BoundGuardSet> xIsNone() {
  auto Sets = parseGirString(R"(guard_set "u" {
  object #0 = key strong "'x'"
  %0 = root source="L"
  %1 = frame_local %0 name="x" index=0 key=#0 source="L['x']"
  guard none_match %1 source="L['x']"
}
)");
  EXPECT_TRUE(!!Sets) << llvm::toString(Sets.takeError());
  auto S = std::make_shared<GuardSet>(std::move((*Sets)[0]));
  static PyObject *Key = PyUnicode_InternFromString("x");
  S->objects()[0].Address = reinterpret_cast<uintptr_t>(Key);
  std::string Err;
  std::unique_ptr<BoundGuardSet> B = BoundGuardSet::bind(S, &Err);
  EXPECT_TRUE(B) << Err;
  return std::shared_ptr<BoundGuardSet>(std::move(B));
}

/// Calls `T` on {'x': X} as a front door does.
int call(CheckTarget &T, PyObject *X) {
  PyObject *D = PyDict_New();
  PyDict_SetItemString(D, "x", X);
  int Ok = callCheck(T, D);
  Py_DECREF(D);
  return Ok;
}

TEST(CheckTargetTest, InterpreterUntilCodeIsInstalled) {
  auto T = makeCheckTarget(xIsNone(), nullptr, false);
  EXPECT_EQ(T->Level.load(), -1);
  EXPECT_EQ(call(*T, Py_None), 1);
  EXPECT_EQ(call(*T, Py_True), 0);
  EXPECT_EQ(T->Calls, 2u);
  EXPECT_EQ(T->Failures, 1u);
}

TEST(CheckTargetTest, ProbationUninstallsDisagreeingCode) {
  uint64_t Before = distrustedCount();
  auto T = makeCheckTarget(xIsNone(), nullptr, false);
  // "Native" code that passes everything: wrong for x = True.
  installCode(*T, std::make_shared<FakeCode>(alwaysPass, 2), /*Verify=*/true);
  EXPECT_EQ(T->Level.load(), 2);
  EXPECT_EQ(call(*T, Py_True), 0); // the interpreter's answer stands
  EXPECT_EQ(T->Probations, 1u);
  EXPECT_TRUE(T->Distrusted.load());
  EXPECT_EQ(distrustedCount(), Before + 1);
  EXPECT_EQ(T->Fn.load(), nullptr);
  EXPECT_EQ(T->Level.load(), -1);
  EXPECT_EQ(call(*T, Py_True), 0); // interpreted from now on
  EXPECT_EQ(call(*T, Py_None), 1);
  EXPECT_EQ(T->Probations, 1u);
}

TEST(CheckTargetTest, AgreeingCodeRunsAloneAfterItsFirstCall) {
  auto T = makeCheckTarget(xIsNone(), nullptr, false);
  installCode(*T, std::make_shared<FakeCode>(alwaysFail, 1), /*Verify=*/true);
  EXPECT_EQ(call(*T, Py_True), 0); // both say fail
  EXPECT_FALSE(T->Distrusted.load());
  EXPECT_EQ(T->Probations, 1u);
  // Not on probation any more: the code alone answers, even wrongly.
  EXPECT_EQ(call(*T, Py_None), 0);
  EXPECT_EQ(T->Probations, 1u);
}

TEST(CheckTargetTest, ReplacedCodeLivesUntilNoCallRunsIt) {
  Freed = 0;
  auto T = makeCheckTarget(xIsNone(), std::make_shared<FakeCode>(alwaysFail, 0),
                           false);
  installCode(*T, std::make_shared<FakeCode>(alwaysFail, 1), false);
  EXPECT_EQ(Freed, 0); // retired, not freed: a call may still run it
  EXPECT_TRUE(T->RetiredPending.load());
  ++T->InFlight; // a call of T is running (e.g. inside a Python guard)
  freeRetired(*T);
  EXPECT_EQ(Freed, 0);
  --T->InFlight;
  EXPECT_EQ(call(*T, Py_None), 0); // the last call out frees it
  EXPECT_EQ(Freed, 1);
  EXPECT_FALSE(T->RetiredPending.load());
  T.reset();
  EXPECT_EQ(Freed, 2); // the installed code goes with the target
}

TEST(CheckTargetTest, BackgroundTierInstallsFirstThenNextLevel) {
  auto T = makeCheckTarget(xIsNone(), nullptr, false);
  auto Lookup = [](int Level) -> std::shared_ptr<CodeProvider> {
    return std::make_shared<FakeProvider>(alwaysPass, Level);
  };
  TierUpStats Before = tierUpStats();
  ASSERT_TRUE(startNative(T, 0, 2, Lookup));
  EXPECT_FALSE(startNative(T, 0, 2, Lookup)); // on its way already
  EXPECT_EQ(T->QueuedLevel.load(), 2);
  ASSERT_TRUE(waitTarget(*T, 60));
  TierUpStats After = tierUpStats();
  EXPECT_EQ(After.Scheduled - Before.Scheduled, 2u);
  EXPECT_EQ(After.Installed - Before.Installed, 2u);
  EXPECT_EQ(T->Level.load(), 2);
  EXPECT_EQ(call(*T, Py_None), 1); // probation of the level-2 code: agrees
  EXPECT_EQ(T->Probations, 1u);
  // Nothing to gain at or below the installed level.
  EXPECT_FALSE(tierUp(T, 2, Lookup));
  EXPECT_FALSE(tierUp(T, 1, Lookup));
  drainTierUp();
  EXPECT_EQ(T.use_count(), 1); // the worker let go of it
}

} // namespace

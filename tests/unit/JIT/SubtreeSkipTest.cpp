//===- SubtreeSkipTest.cpp - Subtree skipping against the full check ------===//
//
// A guard set over a small object tree (an object with a __dict__ holding a
// float, a dict, a list, a tuple and a nested object), planned, recorded and
// then mutated in every way a dict tag does and does not see. After each
// mutation the skipping answer -- validation, then the residual set (native
// and interpreted), else the full set -- must equal the full set's, and the
// test states which path decided (so a plan that never skips fails too).
//
//===----------------------------------------------------------------------===//
#include "guardjit/Runtime/SubtreeSkip.h"

#include "guardjit/JIT/Engine.h"
#include "guardjit/Runtime/Interpreter.h"

#include "gtest/gtest.h"

#include "JITTestSupport.h"

using namespace guardjit;
using guardjit::test::Ref;
using guardjit::test::SetBuilder;

namespace {

const char *const SkipPrelude = R"py(
class Inner:
    def __init__(self):
        self.w = 3

class Node:
    def __init__(self):
        self.scale = 0.5
        self.table = {'k': 'v', 'n': None}
        self.items = [1, 2]
        self.pair = (7, 8)
        self.inner = Inner()

class Other(Node):
    pass

def make():
    return {'m': Node(), 'xs': (1, 2)}
)py";

PyObject *skipPrelude() {
  static PyObject *D = [] {
    if (!Py_IsInitialized())
      Py_InitializeEx(0);
    return test::runPrelude(SkipPrelude);
  }();
  return D;
}

PyObject *eval(const char *Expr, PyObject *Locals) {
  PyObject *R = PyRun_String(Expr, Py_eval_input, skipPrelude(), Locals);
  if (!R)
    PyErr_Print();
  return R;
}

void exec(const char *Stmt, PyObject *Locals) {
  Ref R(PyRun_String(Stmt, Py_file_input, skipPrelude(), Locals));
  if (!R)
    PyErr_Print();
  ASSERT_TRUE(R) << Stmt;
}

enum class Path { Skipped, Full };

class SubtreeSkipTest : public ::testing::Test {
protected:
  void SetUp() override {
    skipPrelude();
    auto E = GuardJIT::create({OptLevel::Light, /*VerifyIR=*/true});
    ASSERT_TRUE(!!E) << toString(E.takeError());
    JIT = std::move(*E);
    Locals = Ref(eval("make()", nullptr));
    ASSERT_TRUE(Locals);
    PyObject *M = PyDict_GetItemString(Locals.get(), "m");
    Ref Float(PyFloat_FromDouble(0.5)), Int3(PyLong_FromLong(3)),
        Int2(PyLong_FromLong(2)), Int7(PyLong_FromLong(7)),
        Str(PyUnicode_FromString("v"));
    // L['m'] and what Dynamo guards below it.
    ValueId VM = SB.local("m");
    ValueId VD = SB.unary(AccessorKind::GenericDict, VM);
    SB.guard(GuardKind::TypeMatch, {VM},
             SB.object(reinterpret_cast<PyObject *>(Py_TYPE(M)),
                       ObjectKind::Type));
    ValueId Scale = SB.keyed(AccessorKind::DictGetItem, VD, "scale");
    SB.guard(GuardKind::EqualsMatch, {Scale},
             SB.object(Float.get(), ObjectKind::Constant, true));
    ValueId Table = SB.keyed(AccessorKind::DictGetItem, VD, "table");
    SB.guard(GuardKind::DictLength, {Table}, InvalidId, 2);
    ValueId K = SB.keyed(AccessorKind::DictGetItem, Table, "k");
    SB.guard(GuardKind::EqualsMatch, {K},
             SB.object(Str.get(), ObjectKind::Constant, true));
    ValueId Items = SB.keyed(AccessorKind::DictGetItem, VD, "items");
    SB.guard(GuardKind::LengthCheck, {Items}, InvalidId, 2);
    ValueId Item1 = SB.indexed(AccessorKind::ListGetItem, Items, 1);
    SB.guard(GuardKind::EqualsMatch, {Item1},
             SB.object(Int2.get(), ObjectKind::Constant, true));
    ValueId Pair = SB.keyed(AccessorKind::DictGetItem, VD, "pair");
    ValueId Pair0 = SB.indexed(AccessorKind::TupleGetItem, Pair, 0);
    SB.guard(GuardKind::EqualsMatch, {Pair0},
             SB.object(Int7.get(), ObjectKind::Constant, true));
    ValueId Inner = SB.keyed(AccessorKind::DictGetItem, VD, "inner");
    ValueId W = SB.keyed(AccessorKind::GetAttr, Inner, "w");
    SB.guard(GuardKind::EqualsMatch, {W},
             SB.object(Int3.get(), ObjectKind::Constant, true));
    // L['xs'][1]: a tuple frame local, a new tuple per call in real frames.
    ValueId Xs = SB.local("xs");
    ValueId X1 = SB.indexed(AccessorKind::TupleGetItem, Xs, 1);
    SB.guard(GuardKind::EqualsMatch, {X1},
             SB.object(Int2.get(), ObjectKind::Constant, true));

    Full = SB.bind();
    ASSERT_TRUE(Full);
    ASSERT_TRUE(interpret(*Full, Locals.get()));
    std::string Why;
    Plan = SkipPlan::build(*Full, Locals.get(), &Why, /*CostModel=*/false);
    ASSERT_TRUE(Plan) << Why;
    std::string Err;
    Residual = BoundGuardSet::bind(Plan->residual(), &Err);
    ASSERT_TRUE(Residual) << Err;
    Plan->attach(*Residual);
    auto C = JIT->compile(*Residual);
    ASSERT_TRUE(!!C) << toString(C.takeError());
    Native = std::move(*C);
    ASSERT_TRUE(Plan->record(Locals.get()));
  }

  /// The skipping answer on the current state; checks it against the full
  /// set and the interpreted residual, and re-records after a full pass.
  std::pair<bool, Path> check() {
    bool Want = interpret(*Full, Locals.get());
    if (Plan->validate(Locals.get())) {
      bool Native1 = Native->function()(Locals.get());
      bool Interp = interpret(*Residual, Locals.get());
      EXPECT_EQ(Native1, Interp);
      EXPECT_EQ(Native1, Want);
      return {Native1, Path::Skipped};
    }
    Plan->invalidate();
    if (Want)
      Plan->record(Locals.get());
    return {Want, Path::Full};
  }

  SetBuilder SB{"skip"};
  std::unique_ptr<GuardJIT> JIT;
  Ref Locals;
  std::unique_ptr<BoundGuardSet> Full, Residual;
  std::unique_ptr<SkipPlan> Plan;
  std::unique_ptr<CompiledCheck> Native;
};

TEST_F(SubtreeSkipTest, PlanImpliesDictAndConstantGuards) {
  // Type, float, dict length and item, tuple item, inner attribute: implied.
  // The list's length and item and L['xs'][1] stay.
  EXPECT_GE(Plan->numImpliedGuards(), 6u);
  EXPECT_EQ(Plan->numResidualGuards(), 3u);
  EXPECT_EQ(check(), std::make_pair(true, Path::Skipped));
}

TEST_F(SubtreeSkipTest, DictChangesFallBack) {
  exec("m.scale = 0.25", Locals.get());
  EXPECT_EQ(check(), std::make_pair(false, Path::Full));
  exec("m.scale = 0.5", Locals.get());
  EXPECT_EQ(check(), std::make_pair(true, Path::Full)); // records again
  EXPECT_EQ(check(), std::make_pair(true, Path::Skipped));
  exec("m.table['k'] = 'w'", Locals.get());
  EXPECT_EQ(check(), std::make_pair(false, Path::Full));
}

TEST_F(SubtreeSkipTest, InPlaceChangesNoTagSeesStayChecked) {
  exec("m.items.append(3)", Locals.get());
  EXPECT_EQ(check(), std::make_pair(false, Path::Skipped));
  exec("m.items.pop(); m.items[1] = 5", Locals.get());
  EXPECT_EQ(check(), std::make_pair(false, Path::Skipped));
  exec("m.items[1] = 2", Locals.get());
  EXPECT_EQ(check(), std::make_pair(true, Path::Skipped));
}

TEST_F(SubtreeSkipTest, ClassAndDictReassignedFallBack) {
  exec("m.__class__ = Other", Locals.get());
  EXPECT_EQ(check(), std::make_pair(false, Path::Full));
  exec("m.__class__ = Node", Locals.get());
  EXPECT_EQ(check().first, true);
  exec("m.__dict__ = dict(m.__dict__)", Locals.get()); // equal, new object
  EXPECT_EQ(check(), std::make_pair(true, Path::Full));
  EXPECT_EQ(check(), std::make_pair(true, Path::Skipped));
  exec("Inner.w = 4; del m.inner.w", Locals.get()); // now a class attribute
  EXPECT_EQ(check(), std::make_pair(false, Path::Full));
}

TEST_F(SubtreeSkipTest, NewObjectsAtReusedAddressesNeverMatch) {
  for (int I = 0; I < 20; ++I) {
    exec("m.inner = None; m.inner = Inner(); m.inner.w = 3 + (__import__('"
         "random').random() < 0.5)",
         Locals.get());
    bool Want = interpret(*Full, Locals.get());
    EXPECT_EQ(check().first, Want);
  }
  exec("m = Node()", Locals.get()); // a new object behind the same name
  EXPECT_EQ(check().first, true);
  exec("m = Node(); m.scale = 0.75", Locals.get());
  EXPECT_EQ(check(), std::make_pair(false, Path::Full));
}

TEST_F(SubtreeSkipTest, TupleFrameLocalItemsAreReadEveryCall) {
  exec("xs = (1, 3)", Locals.get()); // a new tuple: no step can see it
  EXPECT_EQ(check(), std::make_pair(false, Path::Skipped));
  exec("xs = (1, 2)", Locals.get());
  EXPECT_EQ(check(), std::make_pair(true, Path::Skipped));
}

} // namespace

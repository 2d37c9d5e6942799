//===- StructuralPassesTest.cpp - cse, dedup, fold-implied, ... -----------===//
//
// Each structural pass on guard sets over live objects: the printed result,
// and the interpreter's answer before and after on inputs that pass and
// inputs that fail at every guard and read the pass touched.
//
//===----------------------------------------------------------------------===//
#include "TestUtil.h"

#include "guardjit/Transforms/CSE.h"
#include "guardjit/Transforms/DeadValues.h"
#include "guardjit/IR/Parser.h"
#include "guardjit/Transforms/Dedup.h"
#include "guardjit/Transforms/FoldImplied.h"
#include "guardjit/Transforms/Order.h"

using namespace guardjit;
using namespace guardjit::test;
using Strings = std::vector<std::string>;

namespace {

class StructuralPassesTest : public ::testing::Test {
protected:
  void SetUp() override {
    exec(R"(
class Obj:
    pass
o = Obj(); o.a = 1
p = Obj()
calls = []
def logged(tag):
    def f(x):
        calls.append(tag)
        return True
    return f
first, second = logged('first'), logged('second')
class Prop:
    n = 0
    @property
    def fresh(self):
        Prop.n += 1
        return Obj()
import types
mod = types.ModuleType('m')
)");
  }
};

TEST_F(StructuralPassesTest, CSEMergesStableReadsAndRewritesUses) {
  SetBuilder B;
  ValueId X1 = B.local("x");
  ValueId X2 = B.local("x"); // another entry for an equal key
  ValueId T1 = B.value(AccessorKind::Type, X1);
  ValueId T2 = B.value(AccessorKind::Type, X2);
  ObjectId Int = B.object("int", ObjectKind::Type);
  B.guard(GuardKind::TypeMatch, {X1}, Int);
  B.guard(GuardKind::IdMatch, {T2}, Int);
  B.guard(GuardKind::NotNone, {T1});
  B.guard(GuardKind::NoTensorAliasing, {X1, X2});
  CSEPass P;
  GuardSet Out = runAndCompare(
      P, B.set(), {"{'x': 3}", "{'x': 'a'}", "{'y': 3}", "{'x': None}"});
  EXPECT_EQ(guardLines(Out), (Strings{"%0 = root source=\"L\"",
                          "%1 = frame_local %0 key=#0 source=\"L['x']\"",
                          "%2 = type %1", "guard type_match %1 object=#2",
                          "guard id_match %2 object=#2",
                          "guard not_none %2",
                          "guard no_tensor_aliasing %1, %1"}));
}

TEST_F(StructuralPassesTest, CSEKeepsGetattrReadsApart) {
  // A property returns a new object per read: two reads are two objects, so
  // merging them would change what NO_TENSOR_ALIASING sees.
  SetBuilder B;
  ValueId X = B.local("x");
  ValueId A1 = B.attr(X, "fresh");
  ValueId A2 = B.attr(X, "fresh");
  B.guard(GuardKind::NoTensorAliasing, {A1, A2});
  CSEPass P;
  GuardSet Out = runAndCompare(P, B.set(), {"{'x': Prop()}", "{'x': o}"});
  EXPECT_EQ(Out.values().size(), 4u);
  EXPECT_TRUE(answer(Out, "{'x': Prop()}"));
}

// Copies of one check with different origins are duplicates too (filters
// run before dedup; the recorder writes one copy per asking Dynamo guard):
// the first stays.
TEST_F(StructuralPassesTest, DedupRemovesRepeatsAndOriginCopiesButNotLambdas) {
  SetBuilder B;
  ValueId X = B.local("x");
  ObjectId Int = B.object("int", ObjectKind::Type);
  ObjectId Two = B.object("2", ObjectKind::Constant);
  ObjectId Two2 = B.object("2", ObjectKind::Constant); // an equal literal
  ObjectId First = B.object("first", ObjectKind::Callable);
  uint32_t O1 = B.origin("TYPE_MATCH"), O2 = B.origin("TYPE_MATCH");
  B.guard(GuardKind::TypeMatch, {X}, Int, 0, O1);
  B.guard(GuardKind::TypeMatch, {X}, Int, 0, O1);
  B.guard(GuardKind::TypeMatch, {X}, Int, 0, O2);
  B.guard(GuardKind::EqualsMatch, {X}, Two);
  B.guard(GuardKind::EqualsMatch, {X}, Two2);
  B.guard(GuardKind::Lambda, {X}, First);
  B.guard(GuardKind::Lambda, {X}, First);
  DedupPass P;
  GuardSet Out =
      runAndCompare(P, B.set(), {"{'x': 2}", "{'x': 3}", "{'x': 2.0}"});
  EXPECT_EQ(guardLines(Out), (Strings{"%0 = root source=\"L\"",
                          "%1 = frame_local %0 key=#0 source=\"L['x']\"",
                          "guard type_match %1 object=#1 origin=0",
                          "guard equals_match %1 object=#2",
                          "guard lambda %1 object=#4",
                          "guard lambda %1 object=#4"}));
  // Both lambda calls still happen.
  exec("calls.clear()");
  EXPECT_TRUE(answer(Out, "{'x': 2}"));
  PyObject *N = eval("len(calls)");
  EXPECT_EQ(PyLong_AsLong(N), 2);
  Py_DECREF(N);
}

// Regression (adversarial review): dedup once ignored Expr and Ints, merged
// `n >= 2` with `n <= 100`, and so passed n = 1000.
TEST_F(StructuralPassesTest, DedupComparesShapeExpressionsAndInts) {
  SetBuilder B;
  ValueId N = B.local("n");
  B.guard(GuardKind::ShapeExpr, {N}).Expr =
      cantFail(parseShapeExprString("(ge (int $0) 2)"));
  B.guard(GuardKind::ShapeExpr, {N}).Expr =
      cantFail(parseShapeExprString("(le (int $0) 100)"));
  B.guard(GuardKind::ShapeExpr, {N}).Expr =
      cantFail(parseShapeExprString("(ge (int $0) 2)"));
  DedupPass P;
  GuardSet Out = runAndCompare(P, B.set(), {"{'n': 1}", "{'n': 50}",
                                            "{'n': 1000}"});
  EXPECT_EQ(Out.guards().size(), 2u);
  EXPECT_FALSE(answer(Out, "{'n': 1000}"));
  EXPECT_TRUE(answer(Out, "{'n': 50}"));

  Guard A, C;
  A.Kind = C.Kind = GuardKind::RangeIteratorMatch;
  A.Ints = {0, 3, 1};
  C.Ints = {0, 5, 1};
  GuardSet R;
  Value V;
  V.Kind = AccessorKind::FrameLocal;
  V.Parent = GuardSet::root();
  ValueId It = R.addValue(V);
  A.Operands = C.Operands = {It};
  R.addGuard(A);
  R.addGuard(C);
  R.addGuard(A);
  P.run(R, PassContext());
  EXPECT_EQ(R.guards().size(), 2u);
}

TEST_F(StructuralPassesTest, DeadValuesKeepsReadsThatCanFail) {
  SetBuilder B;
  ValueId X = B.local("x");
  ValueId T = B.value(AccessorKind::Type, X);
  B.value(AccessorKind::TypeMro, T);
  B.attr(X, "a"); // Dynamo's hasattr: the read is the check
  ValueId Y = B.local("y");
  B.value(AccessorKind::TypeMro, Y); // fails for a non-type
  DeadValuesPass P;
  GuardSet Out = runAndCompare(
      P, B.set(),
      {"{'x': o, 'y': int}", "{'x': p, 'y': int}", "{'x': o, 'y': 3}",
       "{'y': int}"});
  EXPECT_EQ(guardLines(Out), (Strings{"%0 = root source=\"L\"",
                          "%1 = frame_local %0 key=#0 source=\"L['x']\"",
                          "%2 = getattr %1 key=#1 source=\"getattr a\"",
                          "%3 = frame_local %0 key=#2 source=\"L['y']\"",
                          "%4 = type_mro %3"}));
}

TEST_F(StructuralPassesTest, FoldImpliedWithoutLiveFactsKeepsIdTypePairs) {
  SetBuilder B;
  ValueId F = B.local("f");
  B.guard(GuardKind::IdMatch, {F}, B.object("len"));
  B.guard(GuardKind::TypeMatch, {F}, B.object("type(len)", ObjectKind::Type));
  FoldImpliedPass P;
  GuardSet Out = runAndCompare(P, B.set(), {"{'f': len}", "{'f': abs}"});
  EXPECT_EQ(Out.guards().size(), 2u);
}

TEST_F(StructuralPassesTest, FoldImpliedUsesFixedTypesOfLiveObjects) {
  SetBuilder B;
  ValueId F = B.local("f"), M = B.local("m"), O = B.local("o"),
          C = B.local("c"), N = B.local("n"), T = B.local("t");
  ObjectId Len = B.object("len");
  // A builtin function's type is immutable: ID_MATCH proves TYPE_MATCH and
  // NOT_NONE, and the EQUALS_MATCH of the same object.
  B.guard(GuardKind::IdMatch, {F}, Len);
  B.guard(GuardKind::TypeMatch, {F}, B.object("type(len)", ObjectKind::Type));
  B.guard(GuardKind::NotNone, {F});
  B.guard(GuardKind::EqualsMatch, {F}, B.object("len", ObjectKind::Constant));
  // A module's and a user object's __class__ can be reassigned: kept.
  B.guard(GuardKind::IdMatch, {M}, B.object("mod"));
  B.guard(GuardKind::TypeMatch, {M}, B.object("type(mod)", ObjectKind::Type));
  B.guard(GuardKind::IdMatch, {O}, B.object("o"));
  B.guard(GuardKind::TypeMatch, {O}, B.object("Obj", ObjectKind::Type));
  // EQUALS_MATCH(0.5) proves TYPE_MATCH(float); NONE/TRUE_MATCH their types.
  B.guard(GuardKind::EqualsMatch, {C}, B.object("0.5", ObjectKind::Constant));
  B.guard(GuardKind::TypeMatch, {C}, B.object("float", ObjectKind::Type));
  B.guard(GuardKind::NoneMatch, {N});
  B.guard(GuardKind::TypeMatch, {N}, B.object("type(None)", ObjectKind::Type));
  B.guard(GuardKind::TrueMatch, {T});
  B.guard(GuardKind::TypeMatch, {T}, B.object("bool", ObjectKind::Type));
  B.guard(GuardKind::NotNone, {T});
  FoldImpliedPass P;
  const char *Good = "{'f': len, 'm': mod, 'o': o, 'c': 0.5, 'n': None, "
                     "'t': True}";
  GuardSet Out = runAndCompare(
      P, B.set(),
      {Good, "{'f': abs, 'm': mod, 'o': o, 'c': 0.5, 'n': None, 't': True}",
       "{'f': len, 'm': mod, 'o': p, 'c': 0.5, 'n': None, 't': True}",
       "{'f': len, 'm': mod, 'o': o, 'c': 1, 'n': None, 't': True}",
       "{'f': len, 'm': mod, 'o': o, 'c': 0.5, 'n': 0, 't': 1}"},
      liveContext());
  std::vector<std::string> Kinds;
  for (const Guard &G : Out.guards())
    Kinds.push_back(std::string(spelling(G.Kind)));
  EXPECT_EQ(Kinds, (Strings{"id_match", "id_match", "type_match",
                                 "id_match", "type_match", "equals_match",
                                 "none_match", "true_match"}));
  // The reassignment the kept TYPE_MATCH guards against.
  exec("class Obj2: pass\no.__class__ = Obj2");
  EXPECT_FALSE(answer(Out, Good));
  exec("o.__class__ = Obj");
  EXPECT_TRUE(answer(Out, Good));
}

TEST_F(StructuralPassesTest, OrderPutsPureGuardsFirstAndKeepsPythonOrder) {
  SetBuilder B;
  ValueId X = B.local("x"), Y = B.local("y");
  ObjectId First = B.object("first", ObjectKind::Callable);
  ObjectId Second = B.object("second", ObjectKind::Callable);
  B.guard(GuardKind::Lambda, {X}, First);
  B.guard(GuardKind::EqualsMatch, {Y}, B.object("3", ObjectKind::Constant));
  B.guard(GuardKind::Lambda, {X}, Second);
  B.guard(GuardKind::TypeMatch, {X}, B.object("Obj", ObjectKind::Type));
  B.guard(GuardKind::NotNone, {Y});
  OrderPass P;
  GuardSet Out = runAndCompare(
      P, B.set(),
      {"{'x': o, 'y': 3}", "{'x': 1, 'y': 3}", "{'x': o, 'y': None}",
       "{'x': o}"});
  std::vector<std::string> Kinds;
  for (const Guard &G : Out.guards())
    Kinds.push_back(std::string(spelling(G.Kind)));
  EXPECT_EQ(Kinds, (Strings{"type_match", "not_none", "lambda",
                                 "equals_match", "lambda"}));
  exec("calls.clear()");
  EXPECT_TRUE(answer(Out, "{'x': o, 'y': 3}"));
  PyObject *Calls = eval("calls == ['first', 'second']");
  EXPECT_EQ(Calls, Py_True);
  Py_DECREF(Calls);
}

} // namespace

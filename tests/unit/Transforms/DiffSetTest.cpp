//===- DiffSetTest.cpp - Differentiating sets of one code object ----------===//
//
// The diffset pass on unit families over live objects (facts as the plugin
// gives them) and on parsed text: each contradiction rule, positive and
// negative; exact vs greedy; shared prefixes; shape-only and state-only
// differences; empty, identical and opaque units; the policies. Every family
// is also checked with the interpreter: on every given input that passes
// some unit's full set, each reduced set answers as its full set (the
// routing condition, which makes lookup correct in every cache order).
//
//===----------------------------------------------------------------------===//
#include "TestUtil.h"

#include "guardjit/IR/Parser.h"
#include "guardjit/IR/Verifier.h"
#include "guardjit/Transforms/DiffSet.h"
#include "guardjit/Transforms/PassPipeline.h"

#include <random>

using namespace guardjit;
using namespace guardjit::test;

namespace {

class DiffSetTest : public ::testing::Test {
protected:
  void SetUp() override {
    exec(R"(
class Obj:
    pass
o = Obj(); p = Obj()
d1 = {'k': 1}; d0 = {}
s1 = {3}; s0 = set()
)");
  }
};

std::vector<DiffSetUnit> runDiff(const std::vector<const GuardSet *> &Units,
                                 DiffSetPolicy P = DiffSetPolicy::Minimal,
                                 const PassContext &Ctx = liveContext(),
                                 size_t Budget = DiffSetPass::DefaultNodeBudget) {
  std::vector<DiffSetUnit> R = DiffSetPass(P, Budget).run(Units, Ctx);
  EXPECT_EQ(R.size(), Units.size());
  for (const DiffSetUnit &U : R)
    if (U.Set) {
      llvm::Error E = verifyGuardSet(*U.Set);
      EXPECT_FALSE(bool(E)) << llvm::toString(std::move(E));
    }
  return R;
}

/// The routing condition on each frame-locals dict of the list `Inputs`
/// evaluates to: if some full set passes, every reduced set answers as its
/// full set. Each set is bound once.
void expectRoutes(const std::vector<const GuardSet *> &Units,
                  const std::vector<DiffSetUnit> &R, const std::string &Inputs) {
  std::vector<std::unique_ptr<BoundGuardSet>> Full, Reduced;
  for (size_t I = 0; I < Units.size(); ++I) {
    if (!Units[I])
      continue;
    std::string Error;
    Full.push_back(
        BoundGuardSet::bind(std::make_shared<GuardSet>(*Units[I]), &Error));
    ASSERT_TRUE(Full.back()) << Error;
    Reduced.push_back(
        BoundGuardSet::bind(std::make_shared<GuardSet>(*R[I].Set), &Error));
    ASSERT_TRUE(Reduced.back()) << Error;
  }
  PyObject *List = eval(Inputs.c_str());
  ASSERT_TRUE(List && PyList_Check(List));
  size_t Checked = 0;
  for (Py_ssize_t K = 0; K < PyList_GET_SIZE(List); ++K) {
    PyObject *L = PyList_GET_ITEM(List, K);
    std::vector<bool> F, Rd;
    for (size_t I = 0; I < Full.size(); ++I) {
      F.push_back(interpret(*Full[I], L));
      Rd.push_back(interpret(*Reduced[I], L));
    }
    PyErr_Clear();
    if (std::find(F.begin(), F.end(), true) == F.end())
      continue;
    ++Checked;
    if (F != Rd) {
      PyObject *Repr = PyObject_Repr(L);
      ADD_FAILURE() << "routing differs on " << PyUnicode_AsUTF8(Repr);
      Py_XDECREF(Repr);
      break;
    }
  }
  // Not vacuous: some input was warmed up (passes a full set).
  EXPECT_GT(Checked, 0u);
  Py_DECREF(List);
}

/// Two one-local units, each with one guard on `x` built by the callbacks;
/// returns unit 0's stats against unit 1 (minimal).
struct Pair {
  SetBuilder A, B;
  ValueId XA = A.local("x"), XB = B.local("x");
};

DiffSetUnitStats pairStats(Pair &P, const PassContext &Ctx = liveContext()) {
  std::vector<DiffSetUnit> R =
      runDiff({&P.A.set(), &P.B.set()}, DiffSetPolicy::Minimal, Ctx);
  return R[0].Stats;
}

bool contradicts(Pair &P, const PassContext &Ctx = liveContext()) {
  DiffSetUnitStats S = pairStats(P, Ctx);
  EXPECT_EQ(S.ByContradiction + S.ByDifference, 1u);
  return S.ByContradiction == 1;
}

/// Parses one text unit per string (no live objects).
std::vector<GuardSet> parseUnits(const std::vector<std::string> &Texts) {
  std::vector<GuardSet> Out;
  for (const std::string &T : Texts) {
    llvm::Expected<std::vector<GuardSet>> S = parseGirString(T);
    EXPECT_TRUE(bool(S)) << llvm::toString(S.takeError());
    if (S)
      Out.push_back(std::move(S->front()));
  }
  return Out;
}

TEST_F(DiffSetTest, TypeAndIdentityContradictions) {
  {
    Pair P; // TYPE_MATCH int / str
    P.A.guard(GuardKind::TypeMatch, {P.XA}, P.A.object("int", ObjectKind::Type));
    P.B.guard(GuardKind::TypeMatch, {P.XB}, P.B.object("str", ObjectKind::Type));
    EXPECT_TRUE(contradicts(P));
  }
  {
    Pair P; // ID_MATCH o / p
    P.A.guard(GuardKind::IdMatch, {P.XA}, P.A.object("o"));
    P.B.guard(GuardKind::IdMatch, {P.XB}, P.B.object("p"));
    EXPECT_TRUE(contradicts(P));
  }
  for (auto [KA, KB] : {std::pair{GuardKind::NoneMatch, GuardKind::TrueMatch},
                        std::pair{GuardKind::TrueMatch, GuardKind::FalseMatch},
                        std::pair{GuardKind::FalseMatch, GuardKind::NoneMatch},
                        std::pair{GuardKind::NoneMatch, GuardKind::NotNone},
                        std::pair{GuardKind::NotNone, GuardKind::NoneMatch}}) {
    Pair P;
    P.A.guard(KA, {P.XA});
    P.B.guard(KB, {P.XB});
    EXPECT_TRUE(contradicts(P)) << int(KA) << " " << int(KB);
  }
  {
    Pair P; // ID_MATCH(o) vs NONE_MATCH: o's address is not None's
    P.A.guard(GuardKind::IdMatch, {P.XA}, P.A.object("o"));
    P.B.guard(GuardKind::NoneMatch, {P.XB});
    EXPECT_TRUE(contradicts(P));
    EXPECT_FALSE(contradicts(P, PassContext())) << "needs the None address";
  }
  {
    Pair P; // ID_MATCH(None) vs NOT_NONE
    P.A.guard(GuardKind::IdMatch, {P.XA}, P.A.object("None"));
    P.B.guard(GuardKind::NotNone, {P.XB});
    EXPECT_TRUE(contradicts(P));
  }
  {
    Pair P; // ID_MATCH(None) vs NONE_MATCH: the same object, no conflict
    P.A.guard(GuardKind::IdMatch, {P.XA}, P.A.object("None"));
    P.B.guard(GuardKind::NoneMatch, {P.XB});
    EXPECT_FALSE(contradicts(P));
  }
  {
    Pair P; // TYPE_MATCH(float) vs EQUALS_MATCH(1): int is 1's fixed type
    P.A.guard(GuardKind::TypeMatch, {P.XA},
              P.A.object("float", ObjectKind::Type));
    P.B.guard(GuardKind::EqualsMatch, {P.XB}, P.B.object("1", ObjectKind::Constant));
    EXPECT_TRUE(contradicts(P));
    EXPECT_FALSE(contradicts(P, PassContext())) << "needs FixedTypeOf";
  }
  {
    Pair P; // EQUALS_MATCH(1) vs EQUALS_MATCH('a'): int vs str
    P.A.guard(GuardKind::EqualsMatch, {P.XA}, P.A.object("1", ObjectKind::Constant));
    P.B.guard(GuardKind::EqualsMatch, {P.XB}, P.B.object("'a'", ObjectKind::Constant));
    EXPECT_TRUE(contradicts(P));
  }
  {
    Pair P; // NONE_MATCH vs EQUALS_MATCH(1): NoneType vs int
    P.A.guard(GuardKind::NoneMatch, {P.XA});
    P.B.guard(GuardKind::EqualsMatch, {P.XB}, P.B.object("1", ObjectKind::Constant));
    EXPECT_TRUE(contradicts(P));
  }
}

TEST_F(DiffSetTest, EqualsAgainstSingletons) {
  struct Case {
    const char *Constant;
    GuardKind Singleton;
    bool Contradicts;
  };
  const Case Cases[] = {
      {"1", GuardKind::NoneMatch, true},     {"1", GuardKind::TrueMatch, true},
      {"0", GuardKind::FalseMatch, true},    {"True", GuardKind::TrueMatch, false},
      {"True", GuardKind::FalseMatch, true}, {"None", GuardKind::NoneMatch, false},
  };
  for (const Case &C : Cases) {
    Pair P;
    P.A.guard(GuardKind::EqualsMatch, {P.XA},
              P.A.object(C.Constant, ObjectKind::Constant));
    P.B.guard(C.Singleton, {P.XB});
    EXPECT_EQ(contradicts(P), C.Contradicts) << C.Constant;
    // Parsed text (no addresses): by repr, fixed for the three singletons.
    std::string TA = std::string("guard_set \"a\" {\n  object #0 = key strong "
                                 "\"'x'\"\n  object #1 = constant strong \"") +
                     C.Constant +
                     "\"\n  %1 = frame_local %0 name=\"x\" key=#0 "
                     "source=\"L['x']\"\n  guard equals_match %1 object=#1\n}\n";
    std::string TB = std::string("guard_set \"b\" {\n  object #0 = key strong "
                                 "\"'x'\"\n  %1 = frame_local %0 name=\"x\" "
                                 "key=#0 source=\"L['x']\"\n  guard ") +
                     std::string(spelling(C.Singleton)) + " %1\n}\n";
    std::vector<GuardSet> U = parseUnits({TA, TB});
    std::vector<DiffSetUnit> R =
        runDiff({&U[0], &U[1]}, DiffSetPolicy::Minimal, PassContext());
    EXPECT_EQ(R[0].Stats.ByContradiction == 1, C.Contradicts) << C.Constant;
  }
  // In text an object whose repr is "None" may not be None.
  const char *A = R"(guard_set "a" {
  object #0 = key strong "'x'"
  object #1 = constant strong "None"
  %1 = frame_local %0 name="x" key=#0 source="L['x']"
  guard equals_match %1 object=#1
})";
  const char *B = R"(guard_set "b" {
  object #0 = key strong "'x'"
  %1 = frame_local %0 name="x" key=#0 source="L['x']"
  guard not_none %1
})";
  std::vector<GuardSet> U = parseUnits({A, B});
  std::vector<DiffSetUnit> R =
      runDiff({&U[0], &U[1]}, DiffSetPolicy::Minimal, PassContext());
  EXPECT_EQ(R[0].Stats.ByContradiction, 0u);
}

TEST_F(DiffSetTest, NoContradictionWithoutProof) {
  {
    Pair P; // -0.0 == 0.0: one input passes both
    P.A.guard(GuardKind::EqualsMatch, {P.XA}, P.A.object("-0.0", ObjectKind::Constant));
    P.B.guard(GuardKind::EqualsMatch, {P.XB}, P.B.object("0.0", ObjectKind::Constant));
    EXPECT_FALSE(contradicts(P));
  }
  {
    Pair P; // equal fixed types: the values are not compared
    P.A.guard(GuardKind::EqualsMatch, {P.XA}, P.A.object("1", ObjectKind::Constant));
    P.B.guard(GuardKind::EqualsMatch, {P.XB}, P.B.object("2", ObjectKind::Constant));
    EXPECT_FALSE(contradicts(P));
  }
  {
    Pair P; // Obj's __class__ can be assigned: no fixed type
    P.A.guard(GuardKind::TypeMatch, {P.XA}, P.A.object("int", ObjectKind::Type));
    P.B.guard(GuardKind::IdMatch, {P.XB}, P.B.object("o"));
    EXPECT_FALSE(contradicts(P));
  }
  {
    Pair P; // a dict subclass with __len__ can pass both
    P.A.guard(GuardKind::LengthCheck, {P.XA}, InvalidId, 1);
    P.B.guard(GuardKind::DictLength, {P.XB}, InvalidId, 2);
    EXPECT_FALSE(contradicts(P));
  }
  {
    Pair P; // different keys
    P.A.guard(GuardKind::DictContains, {P.XA}, P.A.str("k"), 1);
    P.B.guard(GuardKind::DictContains, {P.XB}, P.B.str("j"), 0);
    EXPECT_FALSE(contradicts(P));
  }
  {
    Pair P; // different values: guards on other paths never conflict
    ValueId YB = P.B.local("y");
    P.A.guard(GuardKind::NoneMatch, {P.XA});
    P.B.guard(GuardKind::NotNone, {YB});
    P.B.guard(GuardKind::NotNone, {P.XB});
    EXPECT_TRUE(contradicts(P));
    Pair Q;
    ValueId YQ = Q.B.local("y");
    Q.A.guard(GuardKind::NoneMatch, {Q.XA});
    Q.B.guard(GuardKind::NotNone, {YQ});
    EXPECT_FALSE(contradicts(Q));
  }
}

TEST_F(DiffSetTest, PayloadContradictions) {
  {
    Pair P;
    P.A.guard(GuardKind::LengthCheck, {P.XA}, InvalidId, 2);
    P.B.guard(GuardKind::LengthCheck, {P.XB}, InvalidId, 3);
    EXPECT_TRUE(contradicts(P));
  }
  {
    Pair P;
    P.A.guard(GuardKind::DictLength, {P.XA}, InvalidId, 0);
    P.B.guard(GuardKind::DictLength, {P.XB}, InvalidId, 1);
    EXPECT_TRUE(contradicts(P));
  }
  {
    Pair P; // copy-on-write against not: one storage, one answer
    P.A.guard(GuardKind::CowTensorMatch, {P.XA}, InvalidId, 1);
    P.B.guard(GuardKind::CowTensorMatch, {P.XB}, InvalidId, 0);
    EXPECT_TRUE(contradicts(P));
    Pair Q; // the same expectation: both pass on one tensor
    Q.A.guard(GuardKind::CowTensorMatch, {Q.XA}, InvalidId, 1);
    Q.B.guard(GuardKind::CowTensorMatch, {Q.XB}, InvalidId, 1);
    EXPECT_FALSE(contradicts(Q));
  }
  for (GuardKind K : {GuardKind::DictContains, GuardKind::SetContains}) {
    Pair P; // the same key, by value in both tables
    ObjectId KA = K == GuardKind::DictContains ? P.A.str("k") : P.A.object("3", ObjectKind::Constant),
             KB = K == GuardKind::DictContains ? P.B.str("k") : P.B.object("3", ObjectKind::Constant);
    // 'k' is interned and 3 is a cached small int: one object in both.
    ASSERT_EQ(P.B.set().object(KB).Address, P.A.set().object(KA).Address);
    P.A.guard(K, {P.XA}, KA, 1);
    P.B.guard(K, {P.XB}, KB, 0);
    EXPECT_TRUE(contradicts(P)) << int(K);
  }
}

std::string tensorUnit(const std::string &Spec, const std::string &Type =
                                                    "<class 'torch.Tensor'>",
                       const std::string &Origin = "") {
  return "guard_set \"u\" {\n  object #0 = type \"" + Type +
         "\"\n  object #1 = key strong \"'x'\"\n  tensor 0 = pytype=#0 " +
         Spec + "\n" + (Origin.empty() ? "" : "  origin 0 = " + Origin + "\n") +
         "  %1 = frame_local %0 name=\"x\" key=#1 source=\"L['x']\"\n"
         "  guard tensor_match %1 tensor=0" +
         (Origin.empty() ? "" : " origin=0") + " source=\"L['x']\"\n}\n";
}

bool textContradicts(const std::string &A, const std::string &B) {
  std::vector<GuardSet> U = parseUnits({A, B});
  std::vector<DiffSetUnit> R =
      runDiff({&U[0], &U[1]}, DiffSetPolicy::Minimal, PassContext());
  return R[0].Stats.ByContradiction == 1;
}

TEST_F(DiffSetTest, TensorMatchContradictions) {
  const std::string Base =
      "keys=0x1 dtype=6 device=-1 requires_grad=false sizes=[2, 3] "
      "strides=[3, 1]";
  const std::string Differ[] = {
      "keys=0x3 dtype=6 device=-1 requires_grad=false sizes=[2, 3] strides=[3, 1]",
      "keys=0x1 dtype=7 device=-1 requires_grad=false sizes=[2, 3] strides=[3, 1]",
      "keys=0x1 dtype=6 device=0 requires_grad=false sizes=[2, 3] strides=[3, 1]",
      "keys=0x1 dtype=6 device=-1 requires_grad=true sizes=[2, 3] strides=[3, 1]",
      "keys=0x1 dtype=6 device=-1 requires_grad=false sizes=[2, 3, 1] strides=[3, 1, 1]",
      "keys=0x1 dtype=6 device=-1 requires_grad=false sizes=[4, 3] strides=[3, 1]",
      "keys=0x1 dtype=6 device=-1 requires_grad=false sizes=[2, 3] strides=[1, 2]",
  };
  for (const std::string &D : Differ)
    EXPECT_TRUE(textContradicts(tensorUnit(Base), tensorUnit(D))) << D;
  EXPECT_TRUE(textContradicts(
      tensorUnit(Base), tensorUnit(Base, "<class 'torch.nn.parameter.Parameter'>")));
  // A dynamic dim on either side: one tensor can pass both.
  const std::string Same[] = {
      "keys=0x1 dtype=6 device=-1 requires_grad=false sizes=[?, 3] strides=[3, 1]",
      "keys=0x1 dtype=6 device=-1 requires_grad=false sizes=[?, ?] strides=[?, 1]",
  };
  for (const std::string &D : Same)
    EXPECT_FALSE(textContradicts(
        tensorUnit("keys=0x1 dtype=6 device=-1 requires_grad=false sizes=[5, "
                   "3] strides=[3, 1]"),
        tensorUnit(D)))
        << D;
}

std::string stateUnit(const std::string &Json) {
  return "guard_set \"u\" {\n  guard global_state str=" + quoteString(Json) +
         "\n}\n";
}

std::string state(bool Grad, bool CpuAutocast, int CpuDType, int Threads = 2) {
  return std::string("{\"allow_bf16_reduce\":0,\"allow_fp16_reduce\":0,"
                     "\"allow_tf32\":false,\"autocast_state\":{\"cached_"
                     "enabled\":true,\"dtype\":[") +
         std::to_string(CpuDType) +
         ",5,5,15,5,5,15,15,5,5],\"enabled\":[" +
         (CpuAutocast ? "true" : "false") +
         ",false,false,false,false,false,false,false,false,false]},"
         "\"default_dtype\":6,\"deterministic_algorithms\":false,"
         "\"deterministic_algorithms_warn_only\":false,\"grad_mode\":" +
         (Grad ? "true" : "false") + ",\"num_threads\":" +
         std::to_string(Threads) +
         ",\"torch_function\":true,\"torch_function_all_disabled\":false}";
}

TEST_F(DiffSetTest, GlobalStateContradictions) {
  EXPECT_TRUE(textContradicts(stateUnit(state(true, false, 15)),
                              stateUnit(state(false, false, 15))));
  EXPECT_TRUE(textContradicts(stateUnit(state(true, false, 15)),
                              stateUnit(state(true, false, 15, 4))));
  EXPECT_TRUE(textContradicts(stateUnit(state(true, false, 15)),
                              stateUnit(state(true, true, 15))));
  EXPECT_TRUE(textContradicts(stateUnit(state(true, true, 15)),
                              stateUnit(state(true, true, 5))));
  // The dtype of a device where autocast is off on both sides is not
  // compared (AutocastState::operator==).
  EXPECT_FALSE(textContradicts(stateUnit(state(true, false, 15)),
                               stateUnit(state(true, false, 5))));
  // Identical states: nothing to tell apart, nothing kept.
  std::vector<GuardSet> U = parseUnits(
      {stateUnit(state(true, false, 15)), stateUnit(state(true, false, 15))});
  std::vector<DiffSetUnit> R = runDiff({&U[0], &U[1]});
  EXPECT_EQ(R[0].Set->guards().size(), 0u);
}

TEST_F(DiffSetTest, TextIdentityIsByRepr) {
  const char *A = R"(guard_set "a" {
  object #0 = key strong "'x'"
  object #1 = object "<Obj at 1>"
  %1 = frame_local %0 name="x" key=#0 source="L['x']"
  guard id_match %1 object=#1
})";
  const char *B = R"(guard_set "b" {
  object #0 = key strong "'x'"
  object #1 = object "<Obj at 1>"
  object #2 = type "<class 'int'>"
  %1 = frame_local %0 name="x" key=#0 source="L['x']"
  guard id_match %1 object=#1
  guard type_match %1 object=#2
})";
  std::vector<GuardSet> U = parseUnits({A, B});
  std::vector<DiffSetUnit> R =
      runDiff({&U[0], &U[1]}, DiffSetPolicy::Minimal, PassContext());
  // Same repr: the same object, so G_b => G_a and a needs nothing; b keeps
  // its type_match (the one check a lacks).
  EXPECT_EQ(R[0].Set->guards().size(), 0u);
  EXPECT_EQ(R[0].Stats.ByDifference, 1u);
  EXPECT_EQ(guardLines(*R[1].Set),
            (std::vector<std::string>{
                "%0 = root source=\"L\"", "%1 = frame_local %0 name=\"x\" key=#0 source=\"L['x']\"",
                "guard type_match %1 object=#1"}));
  // In text a None-ness guard and an ID_MATCH never conflict: the repr does
  // not say whether the object is None.
  const char *C = R"(guard_set "c" {
  object #0 = key strong "'x'"
  %1 = frame_local %0 name="x" key=#0 source="L['x']"
  guard none_match %1
})";
  U = parseUnits({A, C});
  R = runDiff({&U[0], &U[1]}, DiffSetPolicy::Minimal, PassContext());
  EXPECT_EQ(R[0].Stats.ByContradiction, 0u);
}

/// A unit with one TYPE_MATCH per local, int or str.
void typeUnit(SetBuilder &B, const std::vector<bool> &Str) {
  for (size_t I = 0; I < Str.size(); ++I) {
    std::string Name = "v" + std::to_string(I);
    ValueId V = B.local(Name.c_str());
    B.guard(GuardKind::TypeMatch, {V},
            B.object(Str[I] ? "str" : "int", ObjectKind::Type));
  }
}

TEST_F(DiffSetTest, ExactBeatsGreedyPastTheBudget) {
  // Set cover where greedy picks 3 of 5 checks and the optimum is 2: unit 0
  // has five int type checks A1 A2 S1 S2 S3; unit j (1..14) flips the checks
  // whose set holds j, so pair (0, j) is covered by any flipped one.
  const std::vector<std::vector<int>> Sets = {
      {1, 2, 3, 4, 5, 6, 7},      {8, 9, 10, 11, 12, 13, 14},
      {1, 2, 3, 4, 8, 9, 10, 11}, {5, 6, 12, 13},
      {7, 14}};
  std::vector<std::unique_ptr<SetBuilder>> Bs;
  for (int J = 0; J <= 14; ++J) {
    std::vector<bool> Str;
    for (const std::vector<int> &S : Sets)
      Str.push_back(std::find(S.begin(), S.end(), J) != S.end());
    Bs.push_back(std::make_unique<SetBuilder>());
    typeUnit(*Bs.back(), Str);
  }
  std::vector<const GuardSet *> Units;
  for (auto &B : Bs)
    Units.push_back(&B->set());
  std::vector<DiffSetUnit> Greedy =
      runDiff(Units, DiffSetPolicy::Minimal, liveContext(), /*Budget=*/0);
  EXPECT_FALSE(Greedy[0].Stats.Exact);
  EXPECT_EQ(Greedy[0].Set->guards().size(), 3u);
  std::vector<DiffSetUnit> Exact = runDiff(Units);
  EXPECT_TRUE(Exact[0].Stats.Exact);
  EXPECT_EQ(guardLines(*Exact[0].Set),
            (std::vector<std::string>{
                "%0 = root source=\"L\"", "%1 = frame_local %0 key=#0 source=\"L['v0']\"",
                "%2 = frame_local %0 key=#2 source=\"L['v1']\"",
                "guard type_match %1 object=#1", "guard type_match %2 object=#3"}));
  EXPECT_EQ(Exact[0].Stats.ByContradiction, 14u);
  // Both answers route every input the units were built from.
  std::string Inputs = "[";
  for (int J = 0; J <= 14; ++J) {
    std::string L = "{";
    for (const std::vector<int> &S : Sets) {
      size_t K = &S - Sets.data();
      bool Str = std::find(S.begin(), S.end(), J) != S.end();
      L += "'v" + std::to_string(K) + "': " + (Str ? "'s'" : "1") + ", ";
    }
    Inputs += L + "}, ";
  }
  Inputs += "]";
  expectRoutes(Units, Greedy, Inputs);
  expectRoutes(Units, Exact, Inputs);
}

TEST_F(DiffSetTest, SharedPrefixesAreMatchedByPathNotById) {
  exec("m1 = Obj(); m1.a = Obj(); m1.a.b = 1\n"
       "m2 = Obj(); m2.a = Obj(); m2.a.b = 'x'\n");
  // Unit 0 reads self.a.b before self's type; unit 1 in the other order, so
  // the same paths have different value ids.
  SetBuilder A, B;
  ObjectId TA = A.object("Obj", ObjectKind::Type),
           TB = B.object("Obj", ObjectKind::Type);
  ValueId SA = A.local("self");
  ValueId BA = A.attr(A.attr(SA, "a"), "b");
  A.guard(GuardKind::EqualsMatch, {BA}, A.object("1", ObjectKind::Constant));
  A.guard(GuardKind::TypeMatch, {SA}, TA);
  ValueId SB = B.local("self");
  B.guard(GuardKind::TypeMatch, {SB}, TB);
  ValueId AB = B.attr(SB, "a");
  B.guard(GuardKind::TypeMatch, {AB}, TB);
  ValueId BB = B.attr(AB, "b");
  B.guard(GuardKind::EqualsMatch, {BB}, B.object("'x'", ObjectKind::Constant));
  std::vector<const GuardSet *> U = {&A.set(), &B.set()};
  std::vector<DiffSetUnit> R = runDiff(U);
  // The shared TYPE_MATCH on self is dropped; the contradicting constant is
  // kept with its whole path.
  EXPECT_EQ(guardLines(*R[0].Set),
            (std::vector<std::string>{
                "%0 = root source=\"L\"", "%1 = frame_local %0 key=#0 source=\"L['self']\"",
                "%2 = getattr %1 key=#1 source=\"getattr a\"",
                "%3 = getattr %2 key=#2 source=\"getattr b\"",
                "guard equals_match %3 object=#3"}));
  EXPECT_EQ(R[0].Stats.ByContradiction, 1u);
  EXPECT_EQ(R[1].Set->guards().size(), 1u);
  expectRoutes(U, R, "[{'self': m1}, {'self': m2}, {'self': o}, {'self': 1}]");
}

TEST_F(DiffSetTest, UnitsDifferingOnlyInAShapeExpression) {
  // Dynamic-shape units that differ only in a SHAPE_ENV relation: no rule
  // proves two relations exclusive, so each keeps its own (difference).
  auto Unit = [](SetBuilder &B, const char *Expr) {
    ValueId N = B.local("n");
    B.guard(GuardKind::TypeMatch, {N}, B.object("int", ObjectKind::Type));
    B.guard(GuardKind::ShapeExpr, {N}).Expr =
        llvm::cantFail(parseShapeExprString(Expr));
  };
  SetBuilder A, B;
  Unit(A, "(le (int $0) 4)");
  Unit(B, "(gt (int $0) 4)");
  std::vector<const GuardSet *> U = {&A.set(), &B.set()};
  std::vector<DiffSetUnit> R = runDiff(U);
  for (const DiffSetUnit &X : R) {
    ASSERT_EQ(X.Set->guards().size(), 1u);
    EXPECT_EQ(X.Set->guards()[0].Kind, GuardKind::ShapeExpr);
    EXPECT_EQ(X.Stats.ByDifference, 1u);
  }
  expectRoutes(U, R, "[{'n': 3}, {'n': 4}, {'n': 5}, {'n': 'x'}]");
  // The same relation on both sides: identical units, nothing kept.
  SetBuilder C;
  Unit(C, "(le (int $0) 4)");
  R = runDiff({&A.set(), &C.set()});
  EXPECT_EQ(R[0].Set->guards().size(), 0u);
  EXPECT_EQ(R[1].Set->guards().size(), 0u);
}

TEST_F(DiffSetTest, EmptyIdenticalAndGuardlessReadUnits) {
  SetBuilder Empty, Full, Same;
  for (SetBuilder *B : {&Full, &Same}) {
    ValueId X = B->local("x");
    B->guard(GuardKind::NotNone, {X});
    B->guard(GuardKind::TypeMatch, {X}, B->object("int", ObjectKind::Type));
  }
  // An empty unit passes every input: the guarded one keeps everything that
  // sets it apart; the empty one needs nothing (G_j => G_empty).
  std::vector<const GuardSet *> U = {&Full.set(), &Empty.set()};
  std::vector<DiffSetUnit> R = runDiff(U);
  EXPECT_EQ(R[0].Set->guards().size(), 2u);
  EXPECT_EQ(R[1].Set->guards().size(), 0u);
  EXPECT_EQ(R[1].Set->values().size(), 1u);
  expectRoutes(U, R, "[{'x': 1}, {'x': None}, {'x': 'a'}, {}]");
  // Identical units: nothing to tell apart.
  R = runDiff({&Full.set(), &Same.set()});
  EXPECT_EQ(R[0].Set->guards().size(), 0u);
  EXPECT_EQ(R[1].Set->guards().size(), 0u);
  EXPECT_EQ(R[0].Stats.ByDifference, 1u);
  // A guard-less read (Dynamo's hasattr manager) is a check of its own.
  exec("class H:\n    pass\nh1 = H(); h1.flag = 1\nh0 = H()\n");
  SetBuilder Has, Plain;
  ValueId SH = Has.local("s");
  Has.guard(GuardKind::IdMatch, {SH}, Has.object("H", ObjectKind::Type));
  Has.attr(Has.value(AccessorKind::FrameLocal, 0, Has.str("s2"), -1, "L['s2']"),
           "flag");
  ValueId SP = Plain.local("s");
  Plain.guard(GuardKind::IdMatch, {SP}, Plain.object("H", ObjectKind::Type));
  U = {&Has.set(), &Plain.set()};
  R = runDiff(U);
  EXPECT_EQ(guardLines(*R[0].Set),
            (std::vector<std::string>{
                "%0 = root source=\"L\"", "%1 = frame_local %0 key=#0 source=\"L['s2']\"",
                "%2 = getattr %1 key=#1 source=\"getattr flag\""}));
  EXPECT_EQ(R[1].Set->guards().size(), 0u);
  expectRoutes(U, R, "[{'s': H, 's2': h1}, {'s': H, 's2': h0}, {'s': 1, 's2': h1}]");
}

TEST_F(DiffSetTest, OpaqueUnitKeepsEveryOtherSetWhole) {
  SetBuilder A, B;
  ValueId XA = A.local("x"), XB = B.local("x");
  A.guard(GuardKind::NoneMatch, {XA});
  A.guard(GuardKind::NotNone, {A.local("y")});
  B.guard(GuardKind::TrueMatch, {XB});
  std::vector<DiffSetUnit> R = runDiff({&A.set(), nullptr, &B.set()});
  EXPECT_FALSE(R[1].Set.has_value());
  EXPECT_EQ(R[0].Set->guards().size(), 2u);
  EXPECT_EQ(R[0].Stats.ByOpaque, 1u);
  EXPECT_EQ(R[2].Set->guards().size(), 1u);
}

TEST_F(DiffSetTest, ThreeUnitsCacheLinePickup) {
  // The issue's fn(x, a=None, b=None): a/b None or 1.
  auto Unit = [](SetBuilder &B, bool A1, bool B1) {
    ValueId A = B.local("a"), Bv = B.local("b");
    if (A1)
      B.guard(GuardKind::EqualsMatch, {A}, B.object("1", ObjectKind::Constant));
    else
      B.guard(GuardKind::NoneMatch, {A});
    if (B1)
      B.guard(GuardKind::EqualsMatch, {Bv}, B.object("1", ObjectKind::Constant));
    else
      B.guard(GuardKind::NoneMatch, {Bv});
  };
  SetBuilder U0, U1, U2;
  Unit(U2, false, false);
  Unit(U1, true, false);
  Unit(U0, true, true);
  std::vector<const GuardSet *> U = {&U0.set(), &U1.set(), &U2.set()};
  std::vector<DiffSetUnit> R = runDiff(U);
  EXPECT_EQ(R[0].Set->guards().size(), 1u); // b == 1
  EXPECT_EQ(R[1].Set->guards().size(), 2u); // a == 1, b is None
  EXPECT_EQ(R[2].Set->guards().size(), 1u); // a is None
  for (const DiffSetUnit &X : R) {
    EXPECT_TRUE(X.Stats.Exact);
    EXPECT_EQ(X.Stats.ByContradiction, 2u);
  }
  expectRoutes(U, R,
               "[{'a': a, 'b': b} for a in (None, 1, 2, True, 1.0) "
               "for b in (None, 1, 0, False)]");
}

TEST_F(DiffSetTest, TorchCompatibleSeedAndGuardedMinimal) {
  const char *Fmt = R"(guard_set "t" {
  object #0 = type "<class 'torch.Tensor'>"
  object #1 = key strong "'x'"
  object #2 = key strong "'w'"
  object #3 = type "<class 'torch.nn.parameter.Parameter'>"
  object #4 = key strong "'f'"
  object #5 = type "<class 'int'>"
  tensor 0 = pytype=#0 keys=0x1 dtype=6 device=-1 requires_grad=false sizes=[SZ, 3] strides=[3, 1]
  tensor 1 = pytype=#3 keys=0x1 dtype=6 device=-1 requires_grad=true sizes=[3] strides=[1]
  %1 = frame_local %0 name="x" key=#1 source="L['x']"
  %2 = frame_local %0 name="w" key=#2 source="L['w']"
  %3 = frame_local %0 name="f" key=#4 source="L['f']"
  guard tensor_match %1 tensor=0 source="L['x']"
  guard tensor_match %2 tensor=1 source="L['w']"
  guard type_match %3 object=#5
  guard FLAG %3
})";
  auto Unit = [&](const char *Size, const char *Flag) {
    std::string T = Fmt;
    T.replace(T.find("SZ"), 2, Size);
    T.replace(T.find("FLAG"), 4, Flag);
    return T;
  };
  std::vector<GuardSet> U =
      parseUnits({Unit("2", "true_match"), Unit("2", "false_match")});
  std::vector<const GuardSet *> P = {&U[0], &U[1]};
  // minimal: the flag alone.
  std::vector<DiffSetUnit> Min = runDiff(P, DiffSetPolicy::Minimal, PassContext());
  EXPECT_EQ(guardLines(*Min[0].Set),
            (std::vector<std::string>{
                "%0 = root source=\"L\"", "%1 = frame_local %0 name=\"f\" key=#0 source=\"L['f']\"",
                "guard true_match %1"}));
  // torch-compatible: the non-Parameter tensor's guards are torch's seed,
  // then the flag (the seed does not tell the units apart).
  std::vector<DiffSetUnit> TC =
      runDiff(P, DiffSetPolicy::TorchCompatible, PassContext());
  EXPECT_EQ(TC[0].Stats.Seed, 1u);
  EXPECT_EQ(TC[0].Set->guards().size(), 2u);
  EXPECT_EQ(TC[0].Set->guards()[0].Kind, GuardKind::TensorMatch);
  EXPECT_EQ(TC[0].Set->guards()[1].Kind, GuardKind::TrueMatch);
  // guarded-minimal: the flag, the type_match, and a rank-only copy of each
  // TENSOR_MATCH (the Parameter's too).
  std::vector<DiffSetUnit> GM =
      runDiff(P, DiffSetPolicy::GuardedMinimal, PassContext());
  std::string Text = printGuardSet(*GM[0].Set);
  EXPECT_NE(Text.find("sizes=[?, ?] strides=[?, ?]"), std::string::npos) << Text;
  EXPECT_NE(Text.find("requires_grad=true sizes=[?] strides=[?]"),
            std::string::npos)
      << Text;
  EXPECT_EQ(GM[0].Set->guards().size(), 4u);
  // Units that differ in a static size: torch's seed covers the pair, so
  // torch-compatible adds nothing to it.
  U = parseUnits({Unit("2", "true_match"), Unit("5", "true_match")});
  P = {&U[0], &U[1]};
  TC = runDiff(P, DiffSetPolicy::TorchCompatible, PassContext());
  EXPECT_EQ(TC[0].Set->guards().size(), 1u);
  EXPECT_EQ(TC[0].Stats.ByContradiction, 1u);
  Min = runDiff(P, DiffSetPolicy::Minimal, PassContext());
  EXPECT_EQ(Min[0].Set->guards().size(), 1u);
}

TEST_F(DiffSetTest, PipelineParsesPoliciesAndNeedsUnits) {
  for (const char *T : {"diffset", "diffset<minimal>", "diffset<guarded-minimal>",
                        "dedup,diffset<torch-compatible>,order"}) {
    llvm::Expected<PassPipeline> P = PassPipeline::parse(T);
    ASSERT_TRUE(bool(P)) << llvm::toString(P.takeError());
    EXPECT_TRUE(P->hasMultiSetPass());
  }
  EXPECT_EQ(llvm::cantFail(PassPipeline::parse("diffset")).str(),
            "diffset<torch-compatible>");
  llvm::Expected<PassPipeline> Bad = PassPipeline::parse("cse,diffset<fast>");
  ASSERT_FALSE(bool(Bad));
  llvm::handleAllErrors(Bad.takeError(), [](const PipelineError &E) {
    EXPECT_EQ(E.column(), 12u);
    EXPECT_EQ(E.text(), "unknown policy 'fast' of pass 'diffset' (expected: "
                        "torch-compatible, minimal, guarded-minimal)");
  });
  // A filter after the multi-set pass breaks the filters-first rule.
  llvm::Expected<PassPipeline> Late =
      PassPipeline::parse("diffset,skip_all_guards_unsafe");
  EXPECT_FALSE(bool(Late));
  llvm::consumeError(Late.takeError());

  PassPipeline P = llvm::cantFail(PassPipeline::parse("dedup,diffset<minimal>"));
  SetBuilder A, B;
  ValueId XA = A.local("x"), XB = B.local("x");
  A.guard(GuardKind::NoneMatch, {XA});
  A.guard(GuardKind::NoneMatch, {XA});
  B.guard(GuardKind::TrueMatch, {XB});
  GuardSet Lone = A.set();
  llvm::Error E = P.run(Lone, PassContext());
  ASSERT_TRUE(bool(E));
  EXPECT_EQ(llvm::toString(std::move(E)),
            "pass 'diffset' runs over the compile units of a code object, not "
            "over one guard set");
  std::vector<std::optional<GuardSet>> Units = {A.set(), std::nullopt, B.set()};
  std::vector<std::vector<PassRunStats>> Stats;
  ASSERT_FALSE(bool(P.runUnits(Units, liveContext(), &Stats)));
  EXPECT_FALSE(Units[1].has_value());
  ASSERT_EQ(Stats[0].size(), 2u);
  EXPECT_EQ(Stats[0][0].Pass, "dedup");
  EXPECT_EQ(Stats[0][1].Pass, "diffset");
  EXPECT_EQ(Stats[0][1].Counters[0],
            (std::pair<std::string, int64_t>{"guards_in", 1}));
  EXPECT_EQ(Stats[0][1].Counters[5],
            (std::pair<std::string, int64_t>{"by_opaque", 1}));
  EXPECT_TRUE(Stats[1].empty());
}

//===----------------------------------------------------------------------===//
// Property: random unit families, every input of a small domain.
//===----------------------------------------------------------------------===//

TEST_F(DiffSetTest, RandomFamiliesRouteEveryInputOfTheirDomain) {
  // Three locals, each drawn from a domain of values of various types and
  // identities; units are built the way Dynamo builds them (guards that pass
  // on a warm-up input, on a random subset of the locals), plus an
  // occasional guard-less read. Every input of the domain is checked.
  exec("dom = [None, True, False, 0, 1, 2, 1.0, -0.0, 0.0, 'a', o, p, [1], "
       "[1, 2], {'k': 1}, {}]\n");
  const int NumValues = 16;
  PyObject *Dom = eval("dom");
  std::mt19937 Rng(1234);
  auto Pick = [&](int N) { return int(Rng() % unsigned(N)); };
  const char *Names[] = {"a", "b", "c"};
  const std::string Inputs =
      "[{'a': a, 'b': b, 'c': c} for a in dom for b in dom for c in dom]";
  for (int Family = 0; Family < 24; ++Family) {
    size_t NumUnits = 2 + Pick(4);
    std::vector<std::unique_ptr<SetBuilder>> Bs;
    for (size_t U = 0; U < NumUnits; ++U) {
      auto B = std::make_unique<SetBuilder>();
      for (const char *Name : Names) {
        if (Pick(4) == 0)
          continue; // this unit does not guard the local
        ValueId V = B->local(Name);
        PyObject *X = PyList_GET_ITEM(Dom, Pick(NumValues));
        ObjectId T = B->object(reinterpret_cast<PyObject *>(Py_TYPE(X)),
                               ObjectKind::Type, false);
        switch (Pick(6)) {
        case 0:
          B->guard(GuardKind::TypeMatch, {V}, T);
          break;
        case 1:
          B->guard(GuardKind::IdMatch, {V}, B->object(X));
          break;
        case 2:
          if (X == Py_None)
            B->guard(GuardKind::NoneMatch, {V});
          else if (X == Py_True)
            B->guard(GuardKind::TrueMatch, {V});
          else if (X == Py_False)
            B->guard(GuardKind::FalseMatch, {V});
          else
            B->guard(GuardKind::NotNone, {V});
          break;
        case 3:
          B->guard(GuardKind::TypeMatch, {V}, T);
          B->guard(GuardKind::EqualsMatch, {V}, B->object(X, ObjectKind::Constant));
          break;
        case 4:
          if (PyList_Check(X))
            B->guard(GuardKind::LengthCheck, {V}, InvalidId, PyList_GET_SIZE(X));
          else if (PyDict_Check(X))
            B->guard(GuardKind::DictLength, {V}, InvalidId, PyDict_GET_SIZE(X));
          else
            B->guard(GuardKind::EqualsMatch, {V}, B->object(X, ObjectKind::Constant));
          break;
        default:
          if (PyDict_Check(X)) {
            ObjectId Key = B->str("k");
            B->guard(GuardKind::DictContains, {V}, Key,
                     PyDict_GetItemString(X, "k") != nullptr);
          } else {
            // A guard-less read of an attribute (absent on most values).
            B->attr(V, "real");
          }
          break;
        }
      }
      Bs.push_back(std::move(B));
    }
    std::vector<const GuardSet *> Units;
    for (auto &B : Bs)
      Units.push_back(&B->set());
    for (DiffSetPolicy P : {DiffSetPolicy::Minimal, DiffSetPolicy::TorchCompatible,
                            DiffSetPolicy::GuardedMinimal}) {
      std::vector<DiffSetUnit> R = runDiff(Units, P);
      expectRoutes(Units, R, Inputs);
      for (size_t I = 0; I < R.size(); ++I)
        EXPECT_LE(R[I].Stats.GuardsOut,
                  P == DiffSetPolicy::GuardedMinimal ? Units[I]->guards().size()
                                                     : R[I].Stats.GuardsIn);
    }
  }
  Py_DECREF(Dom);
}

} // namespace

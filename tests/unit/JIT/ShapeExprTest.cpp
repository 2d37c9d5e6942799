//===- ShapeExprTest.cpp - shape_expr guards: JIT, interpreter, Python ----===//
//
// Each case is one SHAPE_ENV-style code part written twice: as the Python
// expression Dynamo's epilogue lambda evaluates (the oracle: a raise is a
// failed guard) and as its Guard IR expression. Both tiers must give
// Python's answer on every combination of awkward inputs (negatives, zero
// divisors, int64 limits, beyond int64, NaN, infinities, 2^53 + 1, bools,
// wrong types), at every OptLevel; and the Python fallback must run only
// where int64 / double cannot decide.
//
//===----------------------------------------------------------------------===//
#include "guardjit/IR/Parser.h"
#include "guardjit/JIT/Engine.h"
#include "guardjit/Runtime/BoundGuardSet.h"
#include "guardjit/Runtime/Interpreter.h"
#include "guardjit/Runtime/Python.h"
#include "guardjit/Runtime/ShapeEval.h"

#include "gtest/gtest.h"

#include <limits>

using namespace guardjit;

namespace {

class PythonEnvironment : public ::testing::Environment {
public:
  void SetUp() override { Py_InitializeEx(0); }
};
::testing::Environment *const PyEnv =
    ::testing::AddGlobalTestEnvironment(new PythonEnvironment);

PyObject *ns() {
  static PyObject *NS = [] {
    PyObject *D = PyDict_New();
    PyDict_SetItemString(D, "__builtins__", PyEval_GetBuiltins());
    PyObject *R = PyRun_String(R"py(
import math
fallback_calls = 0
def make_fallback(code):
    # What the recorder builds: the code part alone, `not not` so that a
    # raising __bool__ raises as in Dynamo's `if not (e): return False`.
    fn = eval('lambda L: not not (' + code + ')', {'math': math})
    def fallback(L):
        global fallback_calls
        fallback_calls += 1
        return fn(L)
    return fallback
def oracle(code, L):
    try:
        return bool(eval(code, {'math': math, 'L': L}))
    except Exception:
        return False
)py",
                               Py_file_input, D, D);
    if (!R)
      PyErr_Print();
    Py_XDECREF(R);
    return D;
  }();
  return NS;
}

PyObject *eval(const std::string &Expr) { // new reference
  PyObject *R = PyRun_String(Expr.c_str(), Py_eval_input, ns(), ns());
  if (!R)
    PyErr_Print();
  EXPECT_NE(R, nullptr) << Expr;
  return R;
}

long fallbackCalls() {
  PyObject *N = PyDict_GetItemString(ns(), "fallback_calls");
  return N ? PyLong_AsLong(N) : -1;
}

/// One code part: its Python text, its IR expression, and the locals it
/// reads (operand $i is L[Names[i]]).
struct Case {
  const char *Python;
  const char *Expr;
  std::vector<const char *> Names;
};

/// Builds `shape_expr` over frame locals `Names`, with or without fallback.
std::shared_ptr<GuardSet> makeSet(const Case &C, bool WithFallback,
                                  std::vector<PyObject *> &Keep) {
  auto S = std::make_shared<GuardSet>("shape");
  auto Add = [&](PyObject *O, ObjectKind K) {
    Keep.push_back(O);
    ObjectEntry E;
    E.Kind = K;
    E.Strong = true;
    E.Address = reinterpret_cast<uintptr_t>(O);
    E.Repr = "obj";
    return S->addObject(E);
  };
  Guard G;
  G.Kind = GuardKind::ShapeExpr;
  for (const char *Name : C.Names) {
    Value V;
    V.Kind = AccessorKind::FrameLocal;
    V.Parent = GuardSet::root();
    V.Name = Name;
    V.Key = Add(PyUnicode_InternFromString(Name), ObjectKind::Key);
    V.Source = std::string("L['") + Name + "']";
    G.Operands.push_back(S->addValue(V));
  }
  auto E = parseShapeExprString(C.Expr);
  EXPECT_TRUE(!!E) << toString(E.takeError());
  G.Expr = std::move(*E);
  if (WithFallback)
    G.Object = Add(eval(std::string("make_fallback(") + "'''" + C.Python +
                        "''')"),
                   ObjectKind::Callable);
  G.Attrs.VerboseCode = C.Python;
  S->addGuard(std::move(G));
  return S;
}

const char *const Ints[] = {
    "0",        "1",         "-1",        "2",          "-2",
    "3",        "-7",        "10",        "True",       "2**53",
    "2**53+1",  "-2**53-1",  "2**62",     "2**63-1",    "-2**63",
    "2**63",    "-2**63-1",  "2**100",    "2.0",        "'s'",
};
const char *const Floats[] = {
    "0.0",   "-0.0", "0.5",         "-2.5",   "1e300", "float('inf')",
    "-float('inf')", "float('nan')", "2.0**53", "3",    "2**53+1", "None",
};

class ShapeExprTest : public ::testing::TestWithParam<OptLevel> {
protected:
  void SetUp() override {
    ns();
    auto E = GuardJIT::create({GetParam(), /*VerifyIR=*/true});
    ASSERT_TRUE(!!E) << toString(E.takeError());
    JIT = std::move(*E);
  }

  /// Runs `C` on every combination of `Pools` (one pool per operand).
  void run(const Case &C, std::vector<std::vector<const char *>> Pools) {
    ASSERT_EQ(Pools.size(), C.Names.size());
    std::vector<PyObject *> Keep;
    std::string Error;
    auto WithFb = BoundGuardSet::bind(makeSet(C, true, Keep), &Error);
    ASSERT_TRUE(WithFb) << Error;
    auto NoFb = BoundGuardSet::bind(makeSet(C, false, Keep), &Error);
    ASSERT_TRUE(NoFb) << Error;
    auto CW = JIT->compile(*WithFb);
    ASSERT_TRUE(!!CW) << toString(CW.takeError());
    auto CN = JIT->compile(*NoFb);
    ASSERT_TRUE(!!CN) << toString(CN.takeError());
    CheckFn FW = (*CW)->function(), FN = (*CN)->function();

    std::vector<size_t> Idx(Pools.size(), 0);
    size_t Checked = 0, Native = 0;
    while (true) {
      std::string Dict = "{";
      for (size_t K = 0; K < Pools.size(); ++K)
        Dict += std::string("'") + C.Names[K] + "': " + Pools[K][Idx[K]] + ", ";
      Dict += "}";
      PyObject *L = eval(Dict);
      PyObject *Code = PyUnicode_FromString(C.Python);
      PyObject *Args = PyTuple_Pack(2, Code, L);
      PyObject *OracleFn = PyDict_GetItemString(ns(), "oracle");
      PyObject *O = PyObject_CallObject(OracleFn, Args);
      ASSERT_NE(O, nullptr);
      bool Want = O == Py_True;

      long Before = fallbackCalls();
      bool I = interpret(*WithFb, L);
      long InterpFallbacks = fallbackCalls() - Before;
      bool N = FW(L) == 1;
      long NativeFallbacks = fallbackCalls() - Before - InterpFallbacks;
      EXPECT_FALSE(PyErr_Occurred());
      PyErr_Clear();
      std::string What = std::string(C.Python) + " on " + Dict;
      EXPECT_EQ(I, Want) << "interpreter: " << What;
      EXPECT_EQ(N, Want) << "JIT: " << What;
      EXPECT_EQ(InterpFallbacks, NativeFallbacks)
          << "the tiers disagree on when int64 cannot decide: " << What;
      // Without a fallback, "unknown" fails; otherwise the answer is native.
      bool IN = interpret(*NoFb, L), NN = FN(L) == 1;
      EXPECT_EQ(IN, NN) << "no fallback: " << What;
      if (InterpFallbacks == 0) {
        ++Native;
        EXPECT_EQ(IN, Want) << "no fallback: " << What;
      } else {
        EXPECT_FALSE(IN) << "unknown without a fallback must fail: " << What;
      }
      ++Checked;
      Py_DECREF(O);
      Py_DECREF(Args);
      Py_DECREF(Code);
      Py_DECREF(L);

      size_t K = 0;
      for (; K < Pools.size(); ++K) {
        if (++Idx[K] < Pools[K].size())
          break;
        Idx[K] = 0;
      }
      if (K == Pools.size())
        break;
    }
    // Most inputs are decided natively.
    EXPECT_GT(Native, Checked / 3) << C.Python;
    CW->reset();
    CN->reset();
    for (PyObject *O : Keep)
      Py_DECREF(O);
  }

  std::unique_ptr<GuardJIT> JIT;
};

std::vector<const char *> ints() { return {std::begin(Ints), std::end(Ints)}; }
std::vector<const char *> floats() {
  return {std::begin(Floats), std::end(Floats)};
}
std::vector<const char *> small() { return {"0", "1", "-1", "2", "-3", "7"}; }

TEST_P(ShapeExprTest, FloorDivisionAndModuloOfNegatives) {
  run({"L['a'] // L['b'] == L['c']",
       "(eq (floordiv (int $0) (int $1)) (int $2))",
       {"a", "b", "c"}},
      {ints(), ints(), {"0", "-1", "1", "-4", "2**63-1", "-2**63"}});
  run({"L['a'] % L['b'] == L['c']", "(eq (mod (int $0) (int $1)) (int $2))",
       {"a", "b", "c"}},
      {ints(), ints(), {"0", "1", "-1", "2", "-2"}});
}

TEST_P(ShapeExprTest, ArithmeticOverflowIsUnknownNotWrong) {
  run({"L['a'] * L['b'] + (-L['a']) - 3 >= 2",
       "(ge (sub (add (mul (int $0) (int $1)) (neg (int $0))) 3) 2)",
       {"a", "b"}},
      {ints(), ints()});
  run({"abs(L['a']) != L['b']", "(ne (abs (int $0)) (int $1))", {"a", "b"}},
      {ints(), ints()});
}

TEST_P(ShapeExprTest, FloatComparisonsAndNan) {
  run({"L['f'] == L['a']", "(eq (float $0) (int $1))", {"f", "a"}},
      {floats(), ints()});
  run({"L['f'] < L['g']", "(lt (float $0) (float $1))", {"f", "g"}},
      {floats(), floats()});
  run({"L['f'] != L['g']", "(ne (float $0) (float $1))", {"f", "g"}},
      {floats(), floats()});
  run({"L['a'] >= L['f']", "(ge (int $0) (float $1))", {"a", "f"}},
      {ints(), floats()});
  run({"not math.isnan(L['f'])", "(not (isnan (float $0)))", {"f"}},
      {floats()});
}

TEST_P(ShapeExprTest, TrueDivisionAndConversions) {
  run({"L['a'] / L['b'] <= L['f']",
       "(le (truediv (int $0) (int $1)) (float $2))",
       {"a", "b", "f"}},
      {ints(), small(), {"0.5", "-1.0", "float('nan')", "2.0"}});
  run({"float(L['a']) * 0.5 + L['f'] / L['g'] > 1.0",
       "(gt (add (mul (to_float (int $0)) 0.5) (truediv (float $1) (float "
       "$2))) 1.0)",
       {"a", "f", "g"}},
      {small(), floats(), floats()});
}

TEST_P(ShapeExprTest, MinMaxFollowBuiltinOrder) {
  run({"min(L['a'], L['b'], 3) == L['c']",
       "(eq (min (int $0) (int $1) 3) (int $2))",
       {"a", "b", "c"}},
      {ints(), small(), small()});
  // max(nan, x) and max(x, nan) differ in Python; the tiers must follow.
  run({"max(L['f'], L['g']) > 0.25", "(gt (max (float $0) (float $1)) 0.25)",
       {"f", "g"}},
      {floats(), floats()});
}

TEST_P(ShapeExprTest, BooleanConnectivesShortCircuit) {
  // The right operand divides by zero only when Python never evaluates it.
  run({"L['b'] == 0 or L['a'] // L['b'] > 1",
       "(or (eq (int $1) 0) (gt (floordiv (int $0) (int $1)) 1))",
       {"a", "b"}},
      {ints(), ints()});
  run({"L['n'] >= 0 and L['n'] <= L['s'] and not (L['n'] % L['s'] != 0)",
       "(and (ge (int $0) 0) (le (int $0) (int $1)) (not (ne (mod (int $0) "
       "(int $1)) 0)))",
       {"n", "s"}},
      {ints(), ints()});
}

TEST(ShapeEvalTest, PythonFloorSemantics) {
  int64_t R;
  bool Z;
  const int64_t Min = std::numeric_limits<int64_t>::min();
  ASSERT_TRUE(pyFloorDiv(-7, 2, &R, &Z));
  EXPECT_EQ(R, -4);
  ASSERT_TRUE(pyFloorDiv(7, -2, &R, &Z));
  EXPECT_EQ(R, -4);
  ASSERT_TRUE(pyMod(-7, 2, &R, &Z));
  EXPECT_EQ(R, 1);
  ASSERT_TRUE(pyMod(7, -2, &R, &Z));
  EXPECT_EQ(R, -1);
  ASSERT_TRUE(pyMod(Min, -1, &R, &Z));
  EXPECT_EQ(R, 0);
  EXPECT_FALSE(pyFloorDiv(Min, -1, &R, &Z));
  EXPECT_FALSE(Z);
  EXPECT_FALSE(pyFloorDiv(1, 0, &R, &Z));
  EXPECT_TRUE(Z);
  EXPECT_FALSE(pyMod(1, 0, &R, &Z));
  EXPECT_TRUE(Z);
}

TEST(ShapeEvalTest, ReadsAreExactTypeTests) {
  int64_t I = 0;
  double D = 0;
  PyObject *Big = eval("2**63"), *Sub = eval("type('I', (int,), {})(5)"),
           *T = eval("True"), *F = eval("1.5"), *FSub =
                                                    eval("type('F', (float,), {})(1.5)");
  EXPECT_EQ(gj_rt_shape_read_int(Big, &I), 0);
  EXPECT_EQ(gj_rt_shape_read_int(Sub, &I), 0); // a subclass may override ops
  EXPECT_EQ(gj_rt_shape_read_int(T, &I), 1);
  EXPECT_EQ(I, 1);
  EXPECT_EQ(gj_rt_shape_read_int(F, &I), 0);
  EXPECT_EQ(gj_rt_shape_read_float(F, &D), 1);
  EXPECT_EQ(D, 1.5);
  EXPECT_EQ(gj_rt_shape_read_float(FSub, &D), 0);
  EXPECT_FALSE(PyErr_Occurred());
  for (PyObject *O : {Big, Sub, T, F, FSub})
    Py_DECREF(O);
}

INSTANTIATE_TEST_SUITE_P(AllLevels, ShapeExprTest,
                         ::testing::Values(OptLevel::O0, OptLevel::Light,
                                           OptLevel::O2),
                         [](const auto &Info) -> std::string {
                           switch (Info.param) {
                           case OptLevel::O0:
                             return "O0";
                           case OptLevel::Light:
                             return "Light";
                           case OptLevel::O2:
                             return "O2";
                           }
                           return "unknown";
                         });

} // namespace

//===- EngineTestSupport.h - The EngineTest fixture and its helpers -*- C++ -*-===//
//
// Shared by the JIT's differential test files (EngineTest.cpp,
// ReadPathsTest.cpp): embedded CPython with a prelude of test classes, the
// interpreter-vs-native comparison `both`, and the EngineTest fixture (one
// engine per OptLevel; EngineTest.cpp instantiates it at every level, for
// the TEST_Ps of every file). Everything here needs the GIL.
//
//===----------------------------------------------------------------------===//
#ifndef GUARDJIT_TESTS_UNIT_JIT_ENGINETESTSUPPORT_H
#define GUARDJIT_TESTS_UNIT_JIT_ENGINETESTSUPPORT_H

#include "guardjit/JIT/Engine.h"

#include "guardjit/IR/GuardSet.h"
#include "guardjit/Runtime/BoundGuardSet.h"
#include "guardjit/Runtime/Interpreter.h"
#include "guardjit/Runtime/Python.h"

#include "gtest/gtest.h"

#include "JITTestSupport.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace guardjit::test::engine {

using guardjit::test::Ref;
using guardjit::test::SetBuilder;

//===----------------------------------------------------------------------===//
// Embedded CPython and small helpers
//===----------------------------------------------------------------------===//

class PythonEnvironment : public ::testing::Environment {
public:
  void SetUp() override { Py_InitializeEx(0); }
  // No Py_Finalize: objects bound by still-registered hooks would outlive it.
};
inline ::testing::Environment *const PyEnv =
    ::testing::AddGlobalTestEnvironment(new PythonEnvironment);

inline const char *const Prelude = R"py(
import math

class C:
    def __init__(self):
        self.a = 1.5
        self.t = (10, 20, 30)
        self.l = [40, 50]
        self.d = {'k': 'v', 'n': None}

    @property
    def boom(self):
        raise RuntimeError('boom')

class C2(C):
    pass

class Dyn:
    def __getattr__(self, name):
        if name == 'dyn':
            return 42
        raise AttributeError(name)

class BadEq:
    def __eq__(self, other):
        raise ValueError('eq')
    __hash__ = object.__hash__

class TSub(tuple):
    pass

class LSub(list):
    pass

def f(x):
    return x

def g(x):
    return x

def positive(x):
    return x > 0

def raising(x):
    raise KeyError('no')

def has_x(frame_locals):
    return 'x' in frame_locals

def bad_truth(x):
    return BadBool()

class BadBool:
    def __bool__(self):
        raise TypeError('no truth')

gv = 'global value'
)py";

/// The namespace every test reads its objects from (borrowed, lives forever).
inline PyObject *prelude() {
  static PyObject *NS = guardjit::test::runPrelude(Prelude);
  return NS;
}

/// Evaluates a Python expression in the prelude namespace (new reference).
inline Ref eval(const char *Expr) {
  PyObject *R = PyRun_String(Expr, Py_eval_input, prelude(), prelude());
  if (!R)
    PyErr_Print();
  EXPECT_NE(R, nullptr) << Expr;
  return Ref(R);
}

/// Runs Python statements in the prelude namespace.
inline void exec(const char *Src) {
  PyObject *R = PyRun_String(Src, Py_file_input, prelude(), prelude());
  if (!R)
    PyErr_Print();
  EXPECT_NE(R, nullptr) << Src;
  Py_XDECREF(R);
}


inline std::string describe(PyObject *O) {
  Ref R(PyObject_Repr(O));
  std::string S = R ? PyUnicode_AsUTF8(R.get()) : "<repr failed>";
  PyErr_Clear();
  return S;
}

/// Runs the interpreter and the native check on `Locals`; reports any
/// disagreement or leaked Python error; returns the native answer.
inline bool both(const BoundGuardSet &BS, CheckFn Fn, PyObject *Locals) {
  bool Interp = interpret(BS, Locals);
  EXPECT_FALSE(PyErr_Occurred()) << "interpreter left an error set";
  PyErr_Clear();
  int Native = Fn(Locals);
  EXPECT_FALSE(PyErr_Occurred()) << "native check left an error set";
  PyErr_Clear();
  EXPECT_TRUE(Native == 0 || Native == 1) << Native;
  EXPECT_EQ(Native == 1, Interp) << "JIT and interpreter disagree on "
                                 << describe(Locals);
  return Native == 1;
}

//===----------------------------------------------------------------------===//
// Fixture: one engine per OptLevel
//===----------------------------------------------------------------------===//

class EngineTest : public ::testing::TestWithParam<OptLevel> {
protected:
  void SetUp() override {
    prelude();
    auto E = GuardJIT::create({GetParam(), /*VerifyIR=*/true});
    ASSERT_TRUE(!!E) << toString(E.takeError());
    JIT = std::move(*E);
  }
  void TearDown() override {
    Checks.clear();
    Bound.clear();
    EXPECT_TRUE(JIT->takeReportedErrors().empty());
  }

  /// Binds and compiles; the fixture keeps both alive for the test.
  std::pair<const BoundGuardSet *, CheckFn> build(SetBuilder &SB) {
    auto BS = SB.bind();
    if (!BS)
      return {nullptr, nullptr};
    auto C = JIT->compile(*BS);
    if (!C) {
      ADD_FAILURE() << toString(C.takeError());
      return {nullptr, nullptr};
    }
    CheckFn Fn = (*C)->function();
    EXPECT_NE(Fn, nullptr);
    Bound.push_back(std::move(BS));
    Checks.push_back(std::move(*C));
    return {Bound.back().get(), Fn};
  }

  std::unique_ptr<GuardJIT> JIT;
  // Destroyed checks first (TearDown), then the sets they bake in.
  std::vector<std::unique_ptr<BoundGuardSet>> Bound;
  std::vector<std::unique_ptr<CompiledCheck>> Checks;
};

#define BUILD(SB)                                                              \
  auto [BS, Fn] = build(SB);                                                   \
  ASSERT_TRUE(BS && Fn)

} // namespace guardjit::test::engine

#endif // GUARDJIT_TESTS_UNIT_JIT_ENGINETESTSUPPORT_H

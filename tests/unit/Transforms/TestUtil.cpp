//===- TestUtil.cpp - Shared helpers of the Transforms tests --------------===//
#include "TestUtil.h"

#include <sstream>

namespace guardjit::test {

namespace {
PyObject *Globals = nullptr;

class PythonEnvironment : public ::testing::Environment {
public:
  void SetUp() override {
    Py_InitializeEx(0);
    Globals = PyDict_New();
    PyDict_SetItemString(Globals, "__builtins__", PyEval_GetBuiltins());
  }
};

const ::testing::Environment *const Env =
    ::testing::AddGlobalTestEnvironment(new PythonEnvironment);
} // namespace

void exec(const char *Code) {
  PyObject *R = PyRun_String(Code, Py_file_input, Globals, Globals);
  if (!R) {
    PyErr_Print();
    FAIL() << "exec failed: " << Code;
  }
  Py_DECREF(R);
}

PyObject *eval(const char *Expr) {
  PyObject *R = PyRun_String(Expr, Py_eval_input, Globals, Globals);
  if (!R) {
    PyErr_Print();
    ADD_FAILURE() << "eval failed: " << Expr;
  }
  return R;
}

SetBuilder::SetBuilder() : S(std::make_shared<GuardSet>("test")) {}

SetBuilder::~SetBuilder() {
  for (PyObject *O : Keep)
    Py_DECREF(O);
}

ObjectId SetBuilder::object(PyObject *O, ObjectKind Kind, bool Strong) {
  Keep.push_back(Py_NewRef(O));
  ObjectEntry E;
  E.Kind = Kind;
  E.Strong = Strong;
  E.Address = reinterpret_cast<uintptr_t>(O);
  if (PyObject *R = PyObject_Repr(O)) {
    E.Repr = PyUnicode_AsUTF8(R);
    Py_DECREF(R);
  }
  PyErr_Clear();
  return S->addObject(E);
}

ObjectId SetBuilder::object(const char *Expr, ObjectKind Kind) {
  PyObject *O = eval(Expr);
  ObjectId Id = object(O, Kind);
  Py_XDECREF(O);
  return Id;
}

ValueId SetBuilder::value(AccessorKind Kind, ValueId Parent, ObjectId Key,
                          int64_t Index, std::string Source) {
  Value V;
  V.Kind = Kind;
  V.Parent = Parent;
  V.Key = Key;
  V.Index = Index;
  V.Source = std::move(Source);
  return S->addValue(V);
}

ValueId SetBuilder::local(const char *Name) {
  return value(AccessorKind::FrameLocal, GuardSet::root(), str(Name), -1,
               std::string("L['") + Name + "']");
}

Guard &SetBuilder::guard(GuardKind Kind, std::vector<ValueId> Operands,
                         ObjectId Object, int64_t Int, uint32_t Origin) {
  Guard G;
  G.Kind = Kind;
  G.Operands = std::move(Operands);
  G.Object = Object;
  G.Int = Int;
  G.Origin = Origin;
  S->addGuard(G);
  return S->guards().back();
}

uint32_t SetBuilder::origin(std::string GuardType, bool IsGlobal) {
  GuardOrigin O;
  O.GuardType = std::move(GuardType);
  O.IsGlobal = IsGlobal;
  O.HasValue = true;
  return S->addOrigin(O);
}

PassContext liveContext() {
  PassContext Ctx;
  Ctx.Facts.FixedTypeOf = fixedTypeOf;
  Ctx.Facts.None = noneAddress();
  Ctx.Facts.True = trueAddress();
  Ctx.Facts.False = falseAddress();
  return Ctx;
}

bool answer(const GuardSet &S, const char *LocalsExpr) {
  std::string Error;
  auto B = BoundGuardSet::bind(std::make_shared<GuardSet>(S), &Error);
  EXPECT_TRUE(B) << Error;
  if (!B)
    return false;
  PyObject *Locals = eval(LocalsExpr);
  bool R = interpret(*B, Locals);
  Py_XDECREF(Locals);
  EXPECT_FALSE(PyErr_Occurred());
  PyErr_Clear();
  return R;
}

GuardSet runAndCompare(Pass &P, const GuardSet &S,
                       const std::vector<const char *> &Locals,
                       const PassContext &Ctx) {
  GuardSet Out = S;
  P.run(Out, Ctx);
  for (const char *L : Locals)
    EXPECT_EQ(answer(S, L), answer(Out, L))
        << P.name().str() << " changed the answer on " << L << "\n"
        << printGuardSet(Out);
  return Out;
}

std::vector<std::string> guardLines(const GuardSet &S) {
  std::vector<std::string> Lines;
  std::istringstream In(printGuardSet(S));
  for (std::string L; std::getline(In, L);)
    if (L.rfind("  guard ", 0) == 0 || L.rfind("  %", 0) == 0) {
      L = L.substr(2);
      const std::string NoSource = " source=\"\"";
      if (L.size() >= NoSource.size() &&
          L.compare(L.size() - NoSource.size(), NoSource.size(), NoSource) == 0)
        L.resize(L.size() - NoSource.size());
      Lines.push_back(L);
    }
  return Lines;
}

} // namespace guardjit::test

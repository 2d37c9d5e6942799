//===- JITTestSupport.h - Guard sets over live objects, for JIT tests -*- C++ -*-===//
//
// Shared by the JIT's GoogleTest files (EngineTest, ConcurrencyStressTest):
// an owned PyObject reference and a builder of guard sets whose object table
// points at live CPython objects. Everything here needs the GIL.
//
//===----------------------------------------------------------------------===//
#ifndef GUARDJIT_TESTS_UNIT_JIT_JITTESTSUPPORT_H
#define GUARDJIT_TESTS_UNIT_JIT_JITTESTSUPPORT_H

#include "guardjit/IR/GuardSet.h"
#include "guardjit/Runtime/BoundGuardSet.h"
#include "guardjit/Runtime/Python.h"

#include "gtest/gtest.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace guardjit::test {

/// An owned reference; destroy with the GIL held.
class Ref {
public:
  Ref() = default;
  explicit Ref(PyObject *P) : P(P) {}
  Ref(Ref &&O) noexcept : P(std::exchange(O.P, nullptr)) {}
  Ref &operator=(Ref &&O) noexcept {
    std::swap(P, O.P);
    return *this;
  }
  ~Ref() { Py_XDECREF(P); }
  PyObject *get() const { return P; }
  explicit operator bool() const { return P; }

private:
  PyObject *P = nullptr;
};

/// A fresh module namespace with `Source` run in it (a new reference that
/// the caller keeps for the process). A failing source prints its error.
inline PyObject *runPrelude(const char *Source) {
  PyObject *D = PyDict_New();
  PyDict_SetItemString(D, "__builtins__", PyEval_GetBuiltins());
  PyObject *R = PyRun_String(Source, Py_file_input, D, D);
  if (!R)
    PyErr_Print();
  Py_XDECREF(R);
  return D;
}

/// Builds a guard set whose object table points at live objects.
class SetBuilder {
public:
  explicit SetBuilder(std::string Name = "test set")
      : S(std::make_shared<GuardSet>(std::move(Name))) {}

  ObjectId object(PyObject *O, ObjectKind K = ObjectKind::Object,
                  bool Strong = false) {
    ObjectEntry E;
    E.Kind = K;
    E.Strong = Strong;
    E.Address = reinterpret_cast<uintptr_t>(O);
    Ref R(PyObject_Repr(O));
    E.Repr = R ? PyUnicode_AsUTF8(R.get()) : "?";
    PyErr_Clear();
    Keep.emplace_back(Py_NewRef(O)); // the test keeps every object alive
    return S->addObject(std::move(E));
  }
  ObjectId str(const char *Text) {
    Ref R(PyUnicode_InternFromString(Text));
    return object(R.get(), ObjectKind::Key, /*Strong=*/true);
  }

  ValueId local(const char *Name) {
    Value V;
    V.Kind = AccessorKind::FrameLocal;
    V.Parent = GuardSet::root();
    V.Name = Name;
    V.Key = str(Name);
    V.Source = std::string("L['") + Name + "']";
    return S->getOrAddValue(std::move(V));
  }
  ValueId keyed(AccessorKind K, ValueId Parent, const char *Name) {
    Value V;
    V.Kind = K;
    V.Parent = Parent;
    V.Name = Name;
    V.Key = str(Name);
    V.Source = S->value(Parent).Source + "." + Name;
    return S->getOrAddValue(std::move(V));
  }
  ValueId indexed(AccessorKind K, ValueId Parent, int64_t Index) {
    Value V;
    V.Kind = K;
    V.Parent = Parent;
    V.Index = Index;
    V.Source = S->value(Parent).Source + "[" + std::to_string(Index) + "]";
    return S->getOrAddValue(std::move(V));
  }
  ValueId unary(AccessorKind K, ValueId Parent) {
    return indexed(K, Parent, -1);
  }
  ValueId globals(PyObject *Dict) {
    Value V;
    V.Kind = AccessorKind::Globals;
    V.Parent = GuardSet::root();
    V.Key = object(Dict, ObjectKind::Dict);
    V.Source = "G";
    return S->getOrAddValue(std::move(V));
  }

  void guard(GuardKind K, std::vector<ValueId> Ops, ObjectId Obj = InvalidId,
             int64_t Int = 0) {
    Guard G;
    G.Kind = K;
    G.Operands = std::move(Ops);
    G.Object = Obj;
    G.Int = Int;
    G.Attrs.Source = G.Operands.empty() ? "" : S->value(G.Operands[0]).Source;
    S->addGuard(std::move(G));
  }

  /// A TENSOR_MATCH whose spec names `PyType`; `Int` feeds the fake hooks.
  void tensorGuard(ValueId Op, PyObject *PyType, int64_t Int) {
    TensorSpec Spec;
    Spec.PyType = object(PyType, ObjectKind::Type);
    guard(GuardKind::TensorMatch, {Op}, InvalidId, Int);
    S->guards().back().Tensor = S->addTensorSpec(std::move(Spec));
  }

  std::unique_ptr<BoundGuardSet> bind() {
    std::string Error;
    auto B = BoundGuardSet::bind(S, &Error);
    EXPECT_TRUE(B) << Error;
    return B;
  }

  std::shared_ptr<GuardSet> S;
  std::vector<Ref> Keep;
};

} // namespace guardjit::test

#endif // GUARDJIT_TESTS_UNIT_JIT_JITTESTSUPPORT_H

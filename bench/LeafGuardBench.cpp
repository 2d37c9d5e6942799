//===- LeafGuardBench.cpp - One leaf guard kind per case ------------------===//
//
// Each case: L['t'] is a tuple of N objects, guard i tests L['t'][i]. The
// floor makes the reads of the guard on each item and nothing else.
//
//===----------------------------------------------------------------------===//
#include "BenchSupport.h"

#include <cmath>
#include <string>

namespace guardjit::bench {

namespace {

/// {'t': tuple(<Expr> for i in range(N))} (new reference).
PyObject *tupleLocals(const std::string &ItemExpr) {
  return eval("{'t': tuple(" + ItemExpr + " for i in range(" +
              std::to_string(N) + "))}");
}

PyObject *item(PyObject *FrameLocals, int I) {
  return tupleItems(FrameLocals)[I];
}

/// One guard of kind `K` on each item, with `Obj(i)` its object (or none).
template <typename ObjFn>
void eachItem(SetBuilder &SB, GuardKind K, ObjFn Obj, int64_t Int = 0) {
  ValueId T = SB.local("t");
  for (int I = 0; I < N; ++I)
    SB.guard(K, {SB.item(T, I)}, Obj(I), Int);
}

ObjectId none(int) { return InvalidId; }

void typeMatch() {
  SetBuilder SB;
  PyObject *FL = tupleLocals("10**6 + i");
  ObjectId Int = SB.object(reinterpret_cast<PyObject *>(&PyLong_Type),
                           ObjectKind::Type, false);
  eachItem(SB, GuardKind::TypeMatch, [&](int) { return Int; });
  registerCase("TYPE_MATCH", SB, FL, [](PyObject *L) {
    PyObject *const *It = tupleItems(L);
    for (int I = 0; I < N; ++I)
      if (Py_TYPE(It[I]) != &PyLong_Type)
        return 0;
    return 1;
  });
}

void idMatch() {
  SetBuilder SB;
  PyObject *FL = tupleLocals("object()");
  auto Expected = std::make_shared<std::vector<PyObject *>>();
  for (int I = 0; I < N; ++I)
    Expected->push_back(item(FL, I));
  eachItem(SB, GuardKind::IdMatch,
           [&](int I) { return SB.object(item(FL, I), ObjectKind::Object); });
  registerCase("ID_MATCH", SB, FL, [Expected](PyObject *L) {
    PyObject *const *It = tupleItems(L);
    for (int I = 0; I < N; ++I)
      if (It[I] != (*Expected)[I])
        return 0;
    return 1;
  });
}

void noneMatch() {
  SetBuilder SB;
  PyObject *FL = tupleLocals("None");
  eachItem(SB, GuardKind::NoneMatch, none);
  registerCase("NONE_MATCH", SB, FL, [](PyObject *L) {
    PyObject *const *It = tupleItems(L);
    for (int I = 0; I < N; ++I)
      if (It[I] != Py_None)
        return 0;
    return 1;
  });
}

void notNone() {
  SetBuilder SB;
  PyObject *FL = tupleLocals("10**6 + i");
  eachItem(SB, GuardKind::NotNone, none);
  registerCase("NOT_NONE", SB, FL, [](PyObject *L) {
    PyObject *const *It = tupleItems(L);
    for (int I = 0; I < N; ++I)
      if (It[I] == Py_None)
        return 0;
    return 1;
  });
}

void equalsMatch() {
  {
    // The common case: the constant is the very object (interned str).
    SetBuilder SB;
    PyObject *FL = tupleLocals("sys.intern('s%d' % i)");
    eachItem(SB, GuardKind::EqualsMatch, [&](int I) {
      return SB.object(item(FL, I), ObjectKind::Constant);
    });
    auto Expected = std::make_shared<std::vector<PyObject *>>();
    for (int I = 0; I < N; ++I)
      Expected->push_back(item(FL, I));
    registerCase("EQUALS_MATCH.identical", SB, FL, [Expected](PyObject *L) {
      PyObject *const *It = tupleItems(L);
      for (int I = 0; I < N; ++I)
        if (It[I] != (*Expected)[I])
          return 0;
      return 1;
    });
  }
  {
    // An equal float that is another object: the type test and ==.
    SetBuilder SB;
    PyObject *FL = tupleLocals("float(i) + 0.5");
    eachItem(SB, GuardKind::EqualsMatch, [&](int I) {
      PyObject *C = PyFloat_FromDouble(I + 0.5);
      ObjectId Id = SB.object(C, ObjectKind::Constant);
      Py_DECREF(C);
      return Id;
    });
    registerCase("EQUALS_MATCH.float", SB, FL, [](PyObject *L) {
      PyObject *const *It = tupleItems(L);
      for (int I = 0; I < N; ++I)
        if (Py_TYPE(It[I]) != &PyFloat_Type ||
            PyFloat_AS_DOUBLE(It[I]) != I + 0.5)
          return 0;
      return 1;
    });
  }
}

void lengthCheck() {
  SetBuilder SB;
  PyObject *FL = tupleLocals("(i, i, i)");
  eachItem(SB, GuardKind::LengthCheck, none, 3);
  registerCase("LENGTH_CHECK", SB, FL, [](PyObject *L) {
    PyObject *const *It = tupleItems(L);
    for (int I = 0; I < N; ++I)
      if (!PyTuple_CheckExact(It[I]) || PyTuple_GET_SIZE(It[I]) != 3)
        return 0;
    return 1;
  });
}

void dictLength() {
  SetBuilder SB;
  PyObject *FL = tupleLocals("{'a': i, 'b': i}");
  eachItem(SB, GuardKind::DictLength, none, 2);
  registerCase("DICT_LENGTH", SB, FL, [](PyObject *L) {
    PyObject *const *It = tupleItems(L);
    for (int I = 0; I < N; ++I)
      if (!PyDict_Check(It[I]) || PyDict_GET_SIZE(It[I]) != 2)
        return 0;
    return 1;
  });
}

void dictContains() {
  SetBuilder SB;
  PyObject *FL = tupleLocals("{'k': i, 'b': i}");
  ObjectId K = SB.str("k");
  eachItem(SB, GuardKind::DictContains, [&](int) { return K; }, 1);
  PyObject *Key = SB.set().objects()[K].Address
                      ? reinterpret_cast<PyObject *>(SB.set().objects()[K].Address)
                      : nullptr;
  registerCase("DICT_CONTAINS", SB, FL, [Key](PyObject *L) {
    PyObject *const *It = tupleItems(L);
    for (int I = 0; I < N; ++I)
      if (!PyDict_Check(It[I]) || PyDict_Contains(It[I], Key) != 1)
        return 0;
    return 1;
  });
}

void dictVersion() {
  SetBuilder SB;
  // One dict object for every item: each guard carries its own tag, so the
  // dicts must be one object for the tags to be equal.
  PyObject *FL = eval("(lambda d: {'t': (d,) * " + std::to_string(N) +
                      "})({'a': 1})");
  auto *D = reinterpret_cast<PyDictObject *>(item(FL, 0));
  uint64_t Tag = D->ma_version_tag;
  eachItem(SB, GuardKind::DictVersion, none, static_cast<int64_t>(Tag));
  registerCase("DICT_VERSION", SB, FL, [Tag](PyObject *L) {
    PyObject *const *It = tupleItems(L);
    for (int I = 0; I < N; ++I)
      if (!PyDict_Check(It[I]) ||
          reinterpret_cast<PyDictObject *>(It[I])->ma_version_tag != Tag)
        return 0;
    return 1;
  });
}

void floatIsNan() {
  SetBuilder SB;
  PyObject *FL = tupleLocals("float('nan')");
  eachItem(SB, GuardKind::FloatIsNan, none);
  registerCase("FLOAT_IS_NAN", SB, FL, [](PyObject *L) {
    PyObject *const *It = tupleItems(L);
    for (int I = 0; I < N; ++I)
      if (!PyFloat_CheckExact(It[I]) || !std::isnan(PyFloat_AS_DOUBLE(It[I])))
        return 0;
    return 1;
  });
}

/// NO_HASATTR over a plain instance and over one whose class defines a
/// Python __getattr__ that raises (how nn.Module answers a missing name).
/// The floor is the same for both: the class lookup (CPython's type cache)
/// and the instance-dict probe that decide absence when no __getattr__ runs.
void noHasAttr() {
  exec("class Plain:\n"
       "    def __init__(self): self.a = 1\n"
       "class PyGetattr:\n"
       "    def __init__(self): self.a = 1\n"
       "    def __getattr__(self, name):\n"
       "        raise AttributeError(f\"'{type(self).__name__}' object has no "
       "attribute '{name}'\")\n");
  for (const char *Cls : {"Plain", "PyGetattr"}) {
    SetBuilder SB;
    PyObject *FL = tupleLocals(std::string(Cls) + "()");
    ObjectId Name = SB.str("missing");
    eachItem(SB, GuardKind::NoHasAttr, [&](int) { return Name; });
    PyObject *NameObj =
        reinterpret_cast<PyObject *>(SB.set().objects()[Name].Address);
    registerCase(std::string("NO_HASATTR.") + Cls, SB, FL,
                 [NameObj](PyObject *L) {
                   PyObject *const *It = tupleItems(L);
                   for (int I = 0; I < N; ++I) {
                     if (_PyType_Lookup(Py_TYPE(It[I]), NameObj))
                       return 0;
                     PyObject **DictPtr = _PyObject_GetDictPtr(It[I]);
                     if (DictPtr && *DictPtr &&
                         PyDict_GetItem(*DictPtr, NameObj))
                       return 0;
                   }
                   return 1;
                 });
  }
}

void lambdaGuard() {
  SetBuilder SB;
  PyObject *FL = tupleLocals("10**6 + i");
  PyObject *Fn = eval("lambda x: x is not None");
  ObjectId F = SB.object(Fn, ObjectKind::Callable);
  eachItem(SB, GuardKind::Lambda, [&](int) { return F; });
  registerCase("LAMBDA", SB, FL, [Fn](PyObject *L) {
    // No cheaper exact way than the call itself.
    PyObject *const *It = tupleItems(L);
    for (int I = 0; I < N; ++I) {
      PyObject *R = PyObject_CallOneArg(Fn, It[I]);
      int T = R ? PyObject_IsTrue(R) : 0;
      Py_XDECREF(R);
      if (T != 1)
        return 0;
    }
    return 1;
  });
  Py_DECREF(Fn);
}

} // namespace

void registerLeafGuardBenchmarks() {
  exec("import sys\n");
  typeMatch();
  idMatch();
  noneMatch();
  notNone();
  equalsMatch();
  lengthCheck();
  dictLength();
  dictContains();
  dictVersion();
  floatIsNan();
  noHasAttr();
  lambdaGuard();
}

} // namespace guardjit::bench

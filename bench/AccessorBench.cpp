//===- AccessorBench.cpp - One accessor kind per case ---------------------===//
//
// Each case reads one child per item of L['t'] through the accessor and
// tests it with ID_MATCH against the object it holds now (so the read is
// used and cannot be dropped): ns_per_guard is item load + accessor +
// compare. The floor makes the cheapest reads that decide the same child.
//
//===----------------------------------------------------------------------===//
#include "BenchSupport.h"

#include "guardjit/Runtime/CPythonABI.h"

#include <string>

namespace guardjit::bench {

namespace {

using Expected = std::shared_ptr<std::vector<PyObject *>>;

/// Registers `Name`: values Acc(L['t'][i] [, Attr]) with ID_MATCH against
/// `ResultExpr` evaluated with x = the item. The floor gets the items and
/// the expected children. An empty `ResultExpr` takes the floor's answer as
/// the expected child.
void accessorCase(const std::string &Name, const std::string &ItemExpr,
                  AccessorKind Acc, const char *Attr,
                  const std::string &ResultExpr,
                  std::function<PyObject *(PyObject *Item)> FloorRead) {
  PyObject *FL = eval("{'t': tuple(" + ItemExpr + " for i in range(" +
                      std::to_string(N) + "))}");
  PyObject *const *It = tupleItems(FL);
  auto Exp = std::make_shared<std::vector<PyObject *>>();
  SetBuilder SB;
  ValueId T = SB.local("t");
  exec(("def _child(x):\n    return " +
       (ResultExpr.empty() ? std::string("None") : ResultExpr) + "\n")
           .c_str());
  PyObject *Child = eval("_child");
  for (int I = 0; I < N; ++I) {
    PyObject *R = ResultExpr.empty() ? Py_NewRef(FloorRead(It[I]))
                                     : PyObject_CallOneArg(Child, It[I]);
    if (!R) {
      PyErr_Print();
      std::abort();
    }
    Exp->push_back(R); // kept alive for the process
    ValueId Item = SB.item(T, I);
    ValueId V = Attr ? SB.keyed(Acc, Item, Attr) : SB.unary(Acc, Item);
    SB.guard(GuardKind::IdMatch, {V}, SB.object(R));
  }
  Py_DECREF(Child);
  registerCase(Name, SB, FL, [Exp, FloorRead](PyObject *L) {
    PyObject *const *Items = tupleItems(L);
    for (int I = 0; I < N; ++I)
      if (FloorRead(Items[I]) != (*Exp)[I])
        return 0;
    return 1;
  });
}

PyObject *internedName(const char *S) { return PyUnicode_InternFromString(S); }

/// The generic attribute read decided without a call: no class attribute
/// (CPython's type cache answers), then the instance dict. What an exact
/// inline read would have to load.
PyObject *genericRead(PyObject *Obj, PyObject *Name) {
  if (_PyType_Lookup(Py_TYPE(Obj), Name))
    return nullptr;
  PyObject **DictPtr = _PyObject_GetDictPtr(Obj);
  return DictPtr && *DictPtr ? PyDict_GetItem(*DictPtr, Name) : nullptr;
}

void frameLocal() {
  // N locals x0..x63 read from the frame locals dict (memo hit).
  std::string Expr = "{";
  for (int I = 0; I < N; ++I)
    Expr += "'x" + std::to_string(I) + "': object(), ";
  PyObject *FL = eval(Expr + "}");
  SetBuilder SB;
  auto Keys = std::make_shared<std::vector<std::pair<PyObject *, PyObject *>>>();
  for (int I = 0; I < N; ++I) {
    std::string K = "x" + std::to_string(I);
    PyObject *V = PyDict_GetItemString(FL, K.c_str());
    SB.guard(GuardKind::IdMatch, {SB.local(K.c_str())}, SB.object(V));
    Keys->push_back({internedName(K.c_str()), V});
  }
  registerCase("frame_local", SB, FL, [Keys](PyObject *L) {
    for (auto &[K, V] : *Keys)
      if (PyDict_GetItem(L, K) != V)
        return 0;
    return 1;
  });
}

} // namespace

void registerAccessorBenchmarks() {
  exec("import math, types\n"
       "class Obj:\n"
       "    def __init__(self): self.a = object()\n"
       "class Config:\n"
       "    # transformers' PretrainedConfig: every read runs Python\n"
       "    def __init__(self): self.a = object()\n"
       "    def __getattribute__(self, key):\n"
       "        return super().__getattribute__(key)\n"
       "class ModuleLike:\n"
       "    # nn.Module: a Python __getattr__, not run on a hit\n"
       "    def __init__(self): self.a = object()\n"
       "    def __getattr__(self, name): raise AttributeError(name)\n"
       "def _fn(i):\n"
       "    def f(x, y=i): return x + i\n"
       "    return f\n"
       "def _materialized(o):\n"
       "    o.__dict__\n"
       "    return o\n");
  static PyObject *A = internedName("a");
  static PyObject *K = internedName("k");
  static PyObject *Pi = internedName("pi");
  frameLocal();
  accessorCase("dict_get_item", "{'k': object()}", AccessorKind::DictGetItem,
               "k", "x['k']", [](PyObject *X) { return PyDict_GetItem(X, K); });
  accessorCase("generic_dict", "_materialized(Obj())", AccessorKind::GenericDict,
               nullptr, "x.__dict__", [](PyObject *X) {
                 return *_PyObject_GetDictPtr(X);
               });
  accessorCase("getattr.instance", "Obj()", AccessorKind::GetAttr, "a", "x.a",
               [](PyObject *X) { return genericRead(X, A); });
  accessorCase("getattr.module", "math", AccessorKind::GetAttr, "pi",
               "x.pi", [](PyObject *X) {
                 return PyDict_GetItem(PyModule_GetDict(X), Pi);
               });
  accessorCase("getattr.py_getattr_hit", "ModuleLike()", AccessorKind::GetAttr,
               "a", "x.a", [](PyObject *X) { return genericRead(X, A); });
  accessorCase("getattr.py_getattribute", "Config()", AccessorKind::GetAttr,
               "a", "x.a", [](PyObject *X) {
                 // The Python __getattribute__ must run: the floor is the call.
                 PyObject *R = PyObject_GetAttr(X, A);
                 Py_XDECREF(R); // the instance keeps it alive
                 return R;
               });
  accessorCase("generic_getattr", "Obj()", AccessorKind::GenericGetAttr, "a",
               "x.a", [](PyObject *X) { return genericRead(X, A); });
  accessorCase("code", "_fn(i)", AccessorKind::Code, nullptr, "x.__code__",
               [](PyObject *X) { return PyFunction_GET_CODE(X); });
  accessorCase("closure", "_fn(i)", AccessorKind::Closure, nullptr,
               "x.__closure__",
               [](PyObject *X) { return PyFunction_GET_CLOSURE(X); });
  accessorCase("func_defaults", "_fn(i)", AccessorKind::FuncDefaults, nullptr,
               "x.__defaults__",
               [](PyObject *X) { return PyFunction_GET_DEFAULTS(X); });
  accessorCase("type_dict", "type('T%d' % i, (), {})", AccessorKind::TypeDict,
               nullptr, "", // tp_dict itself is not reachable from Python
               [](PyObject *X) {
                 return reinterpret_cast<PyTypeObject *>(X)->tp_dict;
               });
}

} // namespace guardjit::bench

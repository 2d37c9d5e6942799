//===- PythonAttr.cpp - Attribute reads without running known Python ------===//
//
// The equivalence argument is docs/guard-semantics.md §13; the comments below
// name the step of CPython 3.11 or of the registered Python function that
// each line reproduces. The rule that keeps it exact: until the last step
// every read here is pure (no user code can run: exact str keys probed in
// dicts whose keys are all exact str, CPython's type attribute cache,
// standard descriptors), so whenever a condition fails we can return Unknown
// and CPython's own path re-does everything from the start. The only reads
// that may run user code (a descriptor's __get__, through
// _PyObject_GenericGetAttrWithDict) are those the real path runs at the same
// point; after one, nothing computed before it is trusted again.
//
//===----------------------------------------------------------------------===//
#include "guardjit/Runtime/PythonAttr.h"

#include "CPythonReads.h"

#include <cstddef>

using namespace guardjit;

namespace {

//===----------------------------------------------------------------------===//
// What is registered, and CPython's private slot functions
//===----------------------------------------------------------------------===//

/// Interned names, created once under the GIL and leaked (as CPython's own
/// _Py_ID strings are immortal).
struct Names {
  PyObject *GetAttr, *GetAttribute, *Dict, *Parameters, *Buffers, *Modules,
      *Type, *AttributeError, *Super, *AttributeMap, *HeterogeneitySpec;
};

/// Static functions of Objects/typeobject.c that decide which path a type's
/// attribute access takes, read from probe classes: slot_tp_getattr_hook
/// (a class with __getattr__), slot_tp_getattro (a class with only
/// __getattribute__, after its first access replaced the hook) and
/// subtype_dict (the `__dict__` getter of a class that added the dict).
struct Slots {
  getattrofunc GetattrHook = nullptr;
  getattrofunc GetattributeOnly = nullptr;
  getter SubtypeDict = nullptr;
  /// object.__dict__['__getattribute__'] (a static type's: never freed).
  PyObject *ObjectGetattribute = nullptr;
};

/// "LOAD_GLOBAL of these names in this function finds exactly these
/// builtins", memoized on the PEP 509 tags of the function's globals and
/// builtins (both fixed per function object; a tag changes on every
/// mutation, so an equal tag means the same contents).
struct GlobalsMemo {
  bool Ok = false;
  uint64_t GlobalsTag = 0, BuiltinsTag = 0;
};

struct Registry {
  bool Ready = false; // Names and Slots initialized
  Names N{};
  Slots S;
  // torch.nn.Module.__getattr__ (strong references).
  PyObject *ModuleFn = nullptr, *ModuleCode = nullptr;
  GlobalsMemo ModuleRaise; // `type`, `AttributeError`
  // PreTrainedConfig.__getattribute__ and the mixin's, with the classes
  // their `__class__` cells held when registered (strong references).
  PyObject *OuterFn = nullptr, *OuterCode = nullptr, *OuterClass = nullptr;
  PyObject *InnerFn = nullptr, *InnerCode = nullptr, *InnerClass = nullptr;
  GlobalsMemo OuterSuper, InnerSuper; // `super`
  /// co_code of `def f(self): return self.x` (a probe), and the code objects
  /// found to have exactly that shape (strong references, never released:
  /// a code object is immutable, so once checked it stays a trivial getter).
  PyObject *GetterTemplate = nullptr;
  PyObject *Fget = nullptr; // interned "fget"
  static constexpr size_t MaxGetters = 32;
  PyObject *Getters[MaxGetters] = {};
  size_t NumGetters = 0;
  /// Nesting of knownGetAttr through trivial getters (bounded).
  unsigned Depth = 0;
  KnownAttrStats Stats;
};

Registry R;

/// Which registered function a type's attribute access runs.
enum class Kind : uint8_t { Other, Module, Config };

/// Per-type classification, memoized by (type address, tp_version_tag) as
/// CPython's own attribute cache is: a valid tag comes from a global counter
/// that is never reused, and every change to the type or to any class of its
/// MRO (attribute set or delete, __bases__, __name__) clears
/// Py_TPFLAGS_VALID_VERSION_TAG on it and on its subclasses (type_modified).
/// So a valid, equal tag at the same address is the same type in the same
/// state, and a freed type's stale entry can never match. Not references.
struct TypeMemo {
  PyTypeObject *Type = nullptr;
  unsigned int Tag = 0;
  Kind K = Kind::Other;
};
constexpr size_t NumTypeMemos = 64;
TypeMemo TypeMemos[NumTypeMemos];

void clearTypeMemos() {
  for (TypeMemo &M : TypeMemos)
    M = TypeMemo();
}

bool initRegistry(std::string *Error) {
  if (R.Ready)
    return true;
  auto Intern = [](const char *S) { return PyUnicode_InternFromString(S); };
  Names N = {Intern("__getattr__"),    Intern("__getattribute__"),
             Intern("__dict__"),       Intern("_parameters"),
             Intern("_buffers"),       Intern("_modules"),
             Intern("type"),           Intern("AttributeError"),
             Intern("super"),          Intern("attribute_map"),
             Intern("_heterogeneity_spec")};
  PyObject *const All[] = {N.GetAttr,    N.GetAttribute,   N.Dict,
                           N.Parameters, N.Buffers,        N.Modules,
                           N.Type,       N.AttributeError, N.Super,
                           N.AttributeMap, N.HeterogeneitySpec};
  for (PyObject *O : All)
    if (!O) {
      PyErr_Clear();
      *Error = "cannot intern attribute names";
      return false;
    }

  // Probe classes (run once): their slots are CPython's static functions.
  PyObject *G = PyDict_New();
  if (!G || PyDict_SetItemString(G, "__builtins__", PyEval_GetBuiltins()) < 0) {
    Py_XDECREF(G);
    PyErr_Clear();
    *Error = "cannot create the probe namespace";
    return false;
  }
  PyObject *Ran = PyRun_String(
      "class WithGetattr:\n"
      "    def __getattr__(self, name):\n"
      "        raise AttributeError(name)\n"
      "class WithGetattribute:\n"
      "    def __getattribute__(self, name):\n"
      "        return object.__getattribute__(self, name)\n"
      "WithGetattribute().__class__\n"
      "def getter(self):\n"
      "    return self.x\n",
      Py_file_input, G, G);
  bool Ok = Ran != nullptr;
  Py_XDECREF(Ran);
  auto *Hook = reinterpret_cast<PyTypeObject *>(
      Ok ? PyDict_GetItemString(G, "WithGetattr") : nullptr);
  auto *Only = reinterpret_cast<PyTypeObject *>(
      Ok ? PyDict_GetItemString(G, "WithGetattribute") : nullptr);
  Slots S;
  if (Hook && Only && PyType_Check(Hook) && PyType_Check(Only)) {
    S.GetattrHook = Hook->tp_getattro;
    // The first attribute access above replaced the hook of a class with
    // no __getattr__ by slot_tp_getattro.
    S.GetattributeOnly = Only->tp_getattro;
    PyObject *D = _PyType_Lookup(Hook, N.Dict);
    if (D && Py_IS_TYPE(D, &PyGetSetDescr_Type))
      S.SubtypeDict =
          reinterpret_cast<PyGetSetDescrObject *>(D)->d_getset->get;
  }
  S.ObjectGetattribute = PyDict_GetItemWithError(PyBaseObject_Type.tp_dict,
                                                 N.GetAttribute);
  PyObject *Getter = Ok ? PyDict_GetItemString(G, "getter") : nullptr;
  PyObject *Template =
      Getter && PyFunction_Check(Getter)
          ? PyCode_GetCode(
                reinterpret_cast<PyCodeObject *>(PyFunction_GET_CODE(Getter)))
          : nullptr;
  PyObject *Fget = PyUnicode_InternFromString("fget");
  Py_DECREF(G); // the probe classes may go: only function pointers are kept
  PyErr_Clear();
  if (!S.GetattrHook || !S.GetattributeOnly || !S.SubtypeDict ||
      S.GetattrHook == S.GetattributeOnly || !S.ObjectGetattribute ||
      !Template || !PyBytes_Check(Template) || !Fget) {
    Py_XDECREF(Template);
    PyErr_Clear();
    *Error = "cannot identify CPython's attribute slot functions";
    return false;
  }
  R.GetterTemplate = Template;
  R.Fget = Fget;
  R.N = N;
  R.S = S;
  R.Ready = true;
  return true;
}

//===----------------------------------------------------------------------===//
// Pure reads
//===----------------------------------------------------------------------===//

/// A dict (any dict type) whose keys are all exact str: probing it with an
/// exact str compares str objects only and runs no user code.
bool strKeyed(PyObject *D) {
  return PyDict_Check(D) && cpy::strKeys(D);
}

/// An exact dict with str keys: `in`, `d[k]` and `d.get(k)` on it are the
/// raw probe (no subclass __contains__/__getitem__/__missing__/get).
bool plainStrDict(PyObject *D) {
  return PyDict_CheckExact(D) && strKeyed(D);
}

/// Probe of a strKeyed dict by an exact str: borrowed result or NULL.
PyObject *probe(PyObject *D, PyObject *Key) {
  PyObject *V = PyDict_GetItemWithError(D, Key);
  if (!V)
    PyErr_Clear(); // cannot be set by a str-only probe; never left behind
  return V;
}

/// Whether the instance dict lookup of _PyObject_GenericGetAttrWithDict on
/// `Obj` is pure: inline values (the type's shared keys are all str), no
/// dict, or a dict whose keys are all str. Then the generic lookup with
/// suppress=1 takes exactly the branches of suppress=0 (the only difference
/// left is that it reports a missing attribute without an exception).
bool instanceDictPure(PyObject *Obj, PyTypeObject *Tp) {
  PyObject *Dict = nullptr;
  if (cpy::hasManagedDict(Tp)) {
    if (cpy::managedValuesInline(Obj))
      return true;
    Dict = cpy::managedDict(Obj);
  } else if (PyObject **Ptr = _PyObject_GetDictPtr(Obj)) {
    // Not managed: tp_dictoffset arithmetic, no side effect.
    Dict = *Ptr;
  }
  return !Dict || strKeyed(Dict);
}

/// LOAD_GLOBAL of each `Names[I]` in function `Fn` yields `Expected[I]`
/// without running user code: globals and builtins are exact str-keyed
/// dicts, the globals lack each name, the builtins map it to the object.
bool globalsResolve(PyObject *FnObj, GlobalsMemo &M, PyObject *const *Names,
                    PyObject *const *Expected, size_t Count) {
  auto *Fn = reinterpret_cast<PyFunctionObject *>(FnObj);
  PyObject *G = Fn->func_globals, *B = Fn->func_builtins;
  if (!G || !B || !plainStrDict(G) || !plainStrDict(B))
    return false;
  uint64_t GT = cpy::dictTag(G), BT = cpy::dictTag(B);
  if (M.Ok && M.GlobalsTag == GT && M.BuiltinsTag == BT)
    return true;
  M.Ok = false;
  for (size_t I = 0; I < Count; ++I)
    if (probe(G, Names[I]) || probe(B, Names[I]) != Expected[I])
      return false;
  M = {true, GT, BT};
  return true;
}

/// The class a zero-argument `super()` in `Fn` names: its only free
/// variable, `__class__` (checked when registering).
PyObject *classCell(PyObject *Fn) {
  PyObject *Closure = reinterpret_cast<PyFunctionObject *>(Fn)->func_closure;
  return PyCell_GET(PyTuple_GET_ITEM(Closure, 0));
}

/// Whether CPython's recursion limit is far away: the real paths enter at
/// most ~6 nested calls (frames, tp_call), so they cannot raise
/// RecursionError here either.
bool farFromRecursionLimit() {
  return PyThreadState_Get()->recursion_remaining > 64;
}

//===----------------------------------------------------------------------===//
// Classifying types
//===----------------------------------------------------------------------===//

/// `self.__dict__` is subtype_dict -> PyObject_GenericGetDict(self): the
/// `__dict__` found in the MRO is the getset CPython adds to a class that
/// gets a dict, and no static base has its own dict (subtype_dict would
/// then call that base's descriptor: get_builtin_base_with_dict).
bool standardDict(PyTypeObject *Tp) {
  PyObject *D = _PyType_Lookup(Tp, R.N.Dict);
  if (!D || !Py_IS_TYPE(D, &PyGetSetDescr_Type) ||
      reinterpret_cast<PyGetSetDescrObject *>(D)->d_getset->get !=
          R.S.SubtypeDict)
    return false;
  for (PyTypeObject *T = Tp; T->tp_base; T = T->tp_base)
    if (T->tp_dictoffset && !(T->tp_flags & Py_TPFLAGS_HEAPTYPE))
      return false;
  return true;
}

/// super_getattro(super(Start, obj), "__getattribute__") for Py_TYPE(obj)
/// `Tp`: the first hit in the class dicts of Tp's MRO after `Start` (the
/// last MRO entry is never searched for `Start`). Null when `Start` is not
/// found, a class dict is not str-keyed (the probe could run user code) or
/// nothing is found (super would fall back to the super object's own
/// attributes).
PyObject *superGetattribute(PyTypeObject *Tp, PyObject *Start) {
  PyObject *Mro = Tp->tp_mro;
  if (!Mro || !PyTuple_Check(Mro))
    return nullptr;
  Py_ssize_t N = PyTuple_GET_SIZE(Mro), I = 0;
  for (; I + 1 < N; ++I)
    if (PyTuple_GET_ITEM(Mro, I) == Start)
      break;
  for (++I; I < N; ++I) {
    PyObject *Dict =
        reinterpret_cast<PyTypeObject *>(PyTuple_GET_ITEM(Mro, I))->tp_dict;
    if (!Dict || !strKeyed(Dict))
      return nullptr;
    if (PyObject *F = probe(Dict, R.N.GetAttribute))
      return F;
  }
  return nullptr;
}

/// slot_tp_getattr_hook's test for "the generic __getattribute__".
bool genericGetattribute(PyObject *GetAttribute) {
  return !GetAttribute ||
         (Py_IS_TYPE(GetAttribute, &PyWrapperDescr_Type) &&
          reinterpret_cast<PyWrapperDescrObject *>(GetAttribute)->d_wrapped ==
              reinterpret_cast<void *>(PyObject_GenericGetAttr));
}

/// The conditions of §13 that depend on the type only (pure reads).
Kind classify(PyTypeObject *Tp) {
  if (Py_TYPE(Tp) != &PyType_Type || !(Tp->tp_flags & Py_TPFLAGS_HEAPTYPE) ||
      !Tp->tp_dict || !standardDict(Tp))
    return Kind::Other;
  PyObject *GetAttr = _PyType_Lookup(Tp, R.N.GetAttr);
  PyObject *GetAttribute = _PyType_Lookup(Tp, R.N.GetAttribute);
  if (R.ModuleFn && GetAttr == R.ModuleFn &&
      Tp->tp_getattro == R.S.GetattrHook && genericGetattribute(GetAttribute) &&
      // `type(self).__name__` in the message is formatted without __format__.
      PyUnicode_CheckExact(reinterpret_cast<PyHeapTypeObject *>(Tp)->ht_name))
    return Kind::Module;
  if (R.OuterFn && !GetAttr && GetAttribute == R.OuterFn &&
      (Tp->tp_getattro == R.S.GetattributeOnly ||
       Tp->tp_getattro == R.S.GetattrHook) &&
      superGetattribute(Tp, R.OuterClass) == R.InnerFn &&
      superGetattribute(Tp, R.InnerClass) == R.S.ObjectGetattribute)
    return Kind::Config;
  return Kind::Other;
}

Kind kindOf(PyTypeObject *Tp) {
  TypeMemo &M = TypeMemos[(reinterpret_cast<uintptr_t>(Tp) >> 4) %
                          NumTypeMemos];
  bool Valid = Tp->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG;
  if (Valid && M.Type == Tp && M.Tag == Tp->tp_version_tag)
    return M.K;
  Kind K = classify(Tp);
  // classify's _PyType_Lookup assigned a tag if the type can have one.
  if (Tp->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG)
    M = {Tp, Tp->tp_version_tag, K};
  return K;
}

/// Still the state classify() saw before a step that may have run user
/// code: same type object with the same valid tag (or, for a type that has
/// no valid tag, classified the same again).
bool unchangedSince(PyObject *Obj, PyTypeObject *Tp, bool HadTag,
                    unsigned int Tag, Kind K) {
  if (Py_TYPE(Obj) != Tp)
    return false;
  if (HadTag)
    return (Tp->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG) &&
           Tp->tp_version_tag == Tag;
  return classify(Tp) == K;
}

//===----------------------------------------------------------------------===//
// torch.nn.Module.__getattr__
//===----------------------------------------------------------------------===//

AttrOutcome found(PyObject *V, PyObject **Value) {
  *Value = V; // a new reference
  return AttrOutcome::Found;
}

AttrOutcome missing() {
  PyErr_Clear();
  return AttrOutcome::Missing;
}

/// call_attribute(self, getattr, name) of slot_tp_getattr_hook: the bound
/// method called with the name is Fn(self, name).
AttrOutcome callModuleGetattr(PyObject *Obj, PyObject *Name, PyObject **Value) {
  ++R.Stats.Delegated;
  PyObject *V = PyObject_CallFunctionObjArgs(R.ModuleFn, Obj, Name, nullptr);
  return V ? found(V, Value) : missing();
}

AttrOutcome moduleRead(PyObject *Obj, PyObject *Name, PyTypeObject *Tp,
                       PyObject **Value) {
  // Per-read conditions: the function still runs the reviewed code.
  if (reinterpret_cast<PyFunctionObject *>(R.ModuleFn)->func_code !=
          R.ModuleCode ||
      !instanceDictPure(Obj, Tp)) {
    ++R.Stats.Delegated;
    return AttrOutcome::Unknown;
  }
  bool HadTag = Tp->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG;
  unsigned int Tag = Tp->tp_version_tag;

  // 1. slot_tp_getattr_hook: `__getattr__` was looked up (classify: the
  //    registered function) and `__getattribute__` is the generic one, so
  //    PyObject_GenericGetAttr(self, name). With a pure instance dict,
  //    suppress=1 takes the same branches and reports "AttributeError" as
  //    NULL without an exception.
  if (PyObject *V = _PyObject_GenericGetAttrWithDict(Obj, Name, nullptr, 1)) {
    ++R.Stats.ModuleReads;
    return found(V, Value);
  }
  if (PyErr_Occurred()) { // not an AttributeError: the hook returns it
    ++R.Stats.ModuleReads;
    return missing();
  }

  // 2. The hook calls the `__getattr__` it looked up before step 1. A
  //    descriptor in step 1 may have run user code: emulate the body only
  //    if nothing it depends on changed, else run it.
  if (!unchangedSince(Obj, Tp, HadTag, Tag, Kind::Module) ||
      reinterpret_cast<PyFunctionObject *>(R.ModuleFn)->func_code !=
          R.ModuleCode)
    return callModuleGetattr(Obj, Name, Value);

  // 3. The body. `self.__dict__` is PyObject_GenericGetDict (classify:
  //    standardDict); it may materialize the dict, as the body's first
  //    read does, and later reads return the same dict.
  PyObject *D = PyObject_GenericGetDict(Obj, nullptr);
  if (!D) { // the body raises
    ++R.Stats.ModuleReads;
    return missing();
  }
  if (!plainStrDict(D)) {
    Py_DECREF(D);
    return callModuleGetattr(Obj, Name, Value);
  }
  //   if "_parameters" in self.__dict__:
  //       _parameters = self.__dict__["_parameters"]
  //       if name in _parameters: return _parameters[name]
  //   ... then "_buffers", then "_modules" (same shape)
  for (PyObject *Key : {R.N.Parameters, R.N.Buffers, R.N.Modules}) {
    PyObject *Sub = probe(D, Key);
    if (!Sub)
      continue;
    if (!plainStrDict(Sub)) {
      Py_DECREF(D);
      return callModuleGetattr(Obj, Name, Value);
    }
    if (PyObject *V = probe(Sub, Name)) {
      Py_INCREF(V);
      Py_DECREF(D);
      ++R.Stats.ModuleReads;
      return found(V, Value);
    }
  }
  Py_DECREF(D);

  // 4. raise AttributeError(f"'{type(self).__name__}' object has no
  //    attribute '{name}'"): pure when `type` and `AttributeError` are the
  //    builtins (the type's metatype is `type` and its name an exact str:
  //    classify). Any exception means "missing", so only purity matters.
  PyObject *const RaiseNames[] = {R.N.Type, R.N.AttributeError};
  PyObject *const RaiseObjects[] = {reinterpret_cast<PyObject *>(&PyType_Type),
                                    PyExc_AttributeError};
  if (!globalsResolve(R.ModuleFn, R.ModuleRaise, RaiseNames, RaiseObjects, 2))
    return callModuleGetattr(Obj, Name, Value);
  ++R.Stats.ModuleReads;
  return AttrOutcome::Missing;
}

//===----------------------------------------------------------------------===//
// Properties whose getter is `return self.<name>`
//===----------------------------------------------------------------------===//

/// Whether `Code` is `def f(self): return self.<co_names[0]>`: one
/// positional argument, no cell or free variable, not a generator or
/// coroutine, no exception table, and the same co_code (CPython 3.11's
/// unspecialized bytecode, as PyCode_GetCode returns it) as the probe
/// getter's. Such a function computes exactly PyObject_GetAttr(arg,
/// co_names[0]). Checked once per code object (code objects are immutable).
bool trivialGetterCode(PyObject *CodeObj) {
  for (size_t I = 0; I < R.NumGetters; ++I)
    if (R.Getters[I] == CodeObj)
      return true;
  auto *Code = reinterpret_cast<PyCodeObject *>(CodeObj);
  constexpr int Kinds = CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR |
                        CO_ITERABLE_COROUTINE | CO_VARARGS | CO_VARKEYWORDS;
  if (Code->co_argcount != 1 || Code->co_posonlyargcount != 0 ||
      Code->co_kwonlyargcount != 0 || Code->co_nfreevars != 0 ||
      Code->co_ncellvars != 0 || (Code->co_flags & Kinds) ||
      !PyTuple_Check(Code->co_names) || PyTuple_GET_SIZE(Code->co_names) != 1 ||
      !PyUnicode_CheckExact(PyTuple_GET_ITEM(Code->co_names, 0)) ||
      !PyBytes_Check(Code->co_exceptiontable) ||
      PyBytes_GET_SIZE(Code->co_exceptiontable) != 0)
    return false;
  PyObject *Bytes = PyCode_GetCode(Code);
  if (!Bytes) {
    PyErr_Clear();
    return false;
  }
  int Same = PyObject_RichCompareBool(Bytes, R.GetterTemplate, Py_EQ);
  Py_DECREF(Bytes);
  PyErr_Clear(); // bytes == bytes cannot raise
  if (Same != 1)
    return false;
  if (R.NumGetters < Registry::MaxGetters)
    R.Getters[R.NumGetters++] = Py_NewRef(CodeObj);
  return true;
}

/// For a data descriptor `Descr` found by _PyType_Lookup: the attribute
/// name `n` if it is an exact `property` whose getter is an exact function
/// running trivial-getter code (`return self.n`), else null. property's
/// __get__ (property_descr_get) is `fget(obj)` for an instance, so reading
/// it is getattr(obj, n). `fget` is a member of the static property type:
/// reading it runs no user code.
PyObject *trivialPropertyName(PyObject *Descr) {
  if (!Py_IS_TYPE(Descr, &PyProperty_Type))
    return nullptr;
  PyObject *Fn = PyObject_GetAttr(Descr, R.Fget);
  if (!Fn) {
    PyErr_Clear();
    return nullptr;
  }
  PyObject *Name = nullptr;
  if (PyFunction_Check(Fn) && trivialGetterCode(PyFunction_GET_CODE(Fn)))
    Name = PyTuple_GET_ITEM(
        reinterpret_cast<PyCodeObject *>(PyFunction_GET_CODE(Fn))->co_names,
        0);
  Py_DECREF(Fn); // the code object (held by Getters) keeps Name alive
  return Name;
}

//===----------------------------------------------------------------------===//
// transformers' PreTrainedConfig.__getattribute__
//===----------------------------------------------------------------------===//

//   # PreTrainedConfig (Outer)
//   def __getattribute__(self, key):
//       if key != "attribute_map" and key in super().__getattribute__("attribute_map"):
//           key = super().__getattribute__("attribute_map")[key]
//       return super().__getattribute__(key)
//   # HeterogeneousConfigMixin (Inner), what Outer's super() finds
//   def __getattribute__(self, key):
//       heterogeneity_spec = super().__getattribute__("__dict__").get("_heterogeneity_spec")
//       if heterogeneity_spec is not None:
//           ...  (not emulated)
//       return super().__getattribute__(key)
//   # and Inner's super() finds object.__getattribute__.
/// The per-read conditions of both registered functions: they still run
/// the reviewed code with the `__class__` cells they were registered with,
/// and `super` resolves to the builtin in both (memoized on dict tags).
bool configFunctionsIntact() {
  PyObject *const SuperName[] = {R.N.Super};
  PyObject *const SuperType[] = {reinterpret_cast<PyObject *>(&PySuper_Type)};
  return reinterpret_cast<PyFunctionObject *>(R.OuterFn)->func_code ==
             R.OuterCode &&
         reinterpret_cast<PyFunctionObject *>(R.InnerFn)->func_code ==
             R.InnerCode &&
         classCell(R.OuterFn) == R.OuterClass &&
         classCell(R.InnerFn) == R.InnerClass &&
         globalsResolve(R.OuterFn, R.OuterSuper, SuperName, SuperType, 1) &&
         globalsResolve(R.InnerFn, R.InnerSuper, SuperName, SuperType, 1);
}

/// `super().__getattribute__("attribute_map")` of Outer for instance dict
/// `D` (plainStrDict, no heterogeneity spec): the instance dict's entry,
/// else the class attribute. Null with *Unknown false when there is none
/// (AttributeError); null with *Unknown true when the read is not pure (a
/// descriptor) or the map is not a plain str-keyed dict.
PyObject *configMap(PyTypeObject *Tp, PyObject *D, bool *Unknown) {
  *Unknown = false;
  PyObject *Descr = _PyType_Lookup(Tp, R.N.AttributeMap);
  if (Descr && Py_TYPE(Descr)->tp_descr_get) {
    *Unknown = true;
    return nullptr;
  }
  PyObject *Map = probe(D, R.N.AttributeMap);
  if (!Map)
    Map = Descr;
  if (Map && !plainStrDict(Map)) {
    *Unknown = true;
    return nullptr;
  }
  return Map;
}

AttrOutcome configRead(PyObject *Obj, PyObject *Key, PyTypeObject *Tp,
                       PyObject **Value) {
  auto Delegate = [] {
    ++R.Stats.Delegated;
    return AttrOutcome::Unknown;
  };
  if (!configFunctionsIntact())
    return Delegate();

  // Inner, for every super().__getattribute__(X) of Outer:
  //   super().__getattribute__("__dict__") is PyObject_GenericGetDict(self)
  //   (standardDict); `.get` is dict.get on an exact str-keyed dict.
  PyObject *D = PyObject_GenericGetDict(Obj, nullptr);
  if (!D) // raised inside Inner: propagates out of Outer
    return missing();
  if (!plainStrDict(D)) {
    Py_DECREF(D);
    return Delegate();
  }
  PyObject *Spec = probe(D, R.N.HeterogeneitySpec);
  if (Spec && Spec != Py_None) {
    Py_DECREF(D);
    return Delegate();
  }
  // Nothing below runs user code before the last step, so the spec read
  // above holds for each of Inner's (up to three) invocations.

  int IsMap = PyUnicode_Compare(Key, R.N.AttributeMap); // exact strs: no error
  if (IsMap != 0) {
    // object.__getattribute__(self, "attribute_map"), pure when the class
    // attribute has no __get__: the instance dict (D, str-keyed) first,
    // then the class attribute itself.
    bool NotPure;
    PyObject *Map = configMap(Tp, D, &NotPure);
    if (NotPure) {
      Py_DECREF(D);
      return Delegate();
    }
    if (!Map) { // AttributeError out of Inner and Outer
      Py_DECREF(D);
      ++R.Stats.ConfigReads;
      return AttrOutcome::Missing;
    }
    // `key in map` and `map[key]` (the second read of attribute_map is
    // the same pure read).
    if (PyObject *Mapped = probe(Map, Key)) {
      if (!PyUnicode_CheckExact(Mapped)) {
        Py_DECREF(D);
        return Delegate();
      }
      Key = Mapped; // borrowed from the map, which D or the type keeps
    }
  }
  Py_INCREF(Key); // the last step may run user code that changes the map
  Py_DECREF(D);

  // The last step: object.__getattribute__(self, key). D is the instance
  // dict and str-keyed, so suppress=1 follows suppress=0's branches; a
  // descriptor's __get__ runs here exactly as in the real path. A data
  // descriptor comes first there; when it is a property with a trivial
  // getter (`return self.n`, e.g. PreTrainedConfig.output_attentions), its
  // __get__ is getattr(self, n), read the same way as any other read.
  ++R.Stats.ConfigReads;
  PyObject *Descr = _PyType_Lookup(Tp, Key);
  if (Descr && Py_TYPE(Descr)->tp_descr_set && R.Depth < 4)
    if (PyObject *Inner = trivialPropertyName(Descr)) {
      Py_DECREF(Key);
      ++R.Depth;
      PyObject *V = nullptr;
      AttrOutcome O = knownGetAttr(Obj, Inner, &V);
      --R.Depth;
      if (O == AttrOutcome::Unknown) {
        V = PyObject_GetAttr(Obj, Inner);
        O = V ? AttrOutcome::Found : AttrOutcome::Missing;
      }
      return O == AttrOutcome::Found ? found(V, Value) : missing();
    }
  PyObject *V = _PyObject_GenericGetAttrWithDict(Obj, Key, nullptr, 1);
  Py_DECREF(Key);
  return V ? found(V, Value) : missing();
}

} // namespace

//===----------------------------------------------------------------------===//
// Pure reads for SubtreeSkip plans
//===----------------------------------------------------------------------===//

KnownAttrKind guardjit::knownAttrKind(PyObject *Obj) {
  if (!R.ModuleFn && !R.OuterFn)
    return KnownAttrKind::None;
  switch (kindOf(Py_TYPE(Obj))) {
  case Kind::Module: {
    PyObject *const RaiseNames[] = {R.N.Type, R.N.AttributeError};
    PyObject *const RaiseObjects[] = {
        reinterpret_cast<PyObject *>(&PyType_Type), PyExc_AttributeError};
    return reinterpret_cast<PyFunctionObject *>(R.ModuleFn)->func_code ==
                       R.ModuleCode &&
                   globalsResolve(R.ModuleFn, R.ModuleRaise, RaiseNames,
                                  RaiseObjects, 2)
               ? KnownAttrKind::Module
               : KnownAttrKind::None;
  }
  case Kind::Config:
    return configFunctionsIntact() ? KnownAttrKind::Config
                                   : KnownAttrKind::None;
  case Kind::Other:
    break;
  }
  return KnownAttrKind::None;
}

PyObject *guardjit::knownConfigMap(PyObject *Obj, PyObject *Dict) {
  if (!Dict || !plainStrDict(Dict))
    return nullptr;
  bool NotPure;
  return configMap(Py_TYPE(Obj), Dict, &NotPure);
}

AttrOutcome guardjit::plainRead(PyObject *Obj, PyObject *Name, PyObject *Dict,
                                PyObject **Value) {
  PyTypeObject *Tp = Py_TYPE(Obj);
  if (!PyUnicode_CheckExact(Name) || (Dict && !plainStrDict(Dict)))
    return AttrOutcome::Unknown;
  KnownAttrKind K = knownAttrKind(Obj);
  if (K == KnownAttrKind::None && Tp->tp_getattro != PyObject_GenericGetAttr)
    return AttrOutcome::Unknown;
  if (K == KnownAttrKind::Config) {
    // configRead with every step a pure read (no descriptor runs).
    if (!Dict)
      return AttrOutcome::Unknown;
    PyObject *Spec = probe(Dict, R.N.HeterogeneitySpec);
    if (Spec && Spec != Py_None)
      return AttrOutcome::Unknown;
    if (PyUnicode_Compare(Name, R.N.AttributeMap) != 0) {
      bool NotPure;
      PyObject *Map = configMap(Tp, Dict, &NotPure);
      if (NotPure)
        return AttrOutcome::Unknown;
      if (!Map)
        return AttrOutcome::Missing;
      if (PyObject *Mapped = probe(Map, Name)) {
        if (!PyUnicode_CheckExact(Mapped))
          return AttrOutcome::Unknown;
        Name = Mapped;
      }
    }
  }
  // object.__getattribute__ (PyObject_GenericGetAttr) with nothing on the
  // type: the instance dict decides. A class attribute is found only when
  // it is an object of a static type with no __get__ (pureAttr's rule: a
  // heap type's object could gain __get__/__set__ with no tag to see it).
  PyObject *Descr = _PyType_Lookup(Tp, Name);
  if (Descr && (Py_TYPE(Descr)->tp_descr_get ||
                (Py_TYPE(Descr)->tp_flags & Py_TPFLAGS_HEAPTYPE)))
    return AttrOutcome::Unknown;
  PyObject *V = Dict ? probe(Dict, Name) : nullptr;
  if (!V)
    V = Descr;
  if (V) {
    *Value = V;
    return AttrOutcome::Found;
  }
  if (K == KnownAttrKind::Module) {
    // nn.Module.__getattr__'s body: `_parameters`, `_buffers`, `_modules`,
    // then a pure raise (moduleRead, steps 3 and 4).
    PyObject *const RaiseNames[] = {R.N.Type, R.N.AttributeError};
    PyObject *const RaiseObjects[] = {
        reinterpret_cast<PyObject *>(&PyType_Type), PyExc_AttributeError};
    if (!Dict ||
        !globalsResolve(R.ModuleFn, R.ModuleRaise, RaiseNames, RaiseObjects, 2))
      return AttrOutcome::Unknown;
    for (PyObject *Key : {R.N.Parameters, R.N.Buffers, R.N.Modules}) {
      PyObject *Sub = probe(Dict, Key);
      if (!Sub)
        continue;
      if (!plainStrDict(Sub))
        return AttrOutcome::Unknown;
      if (PyObject *X = probe(Sub, Name)) {
        *Value = X;
        return AttrOutcome::Found;
      }
    }
  }
  return AttrOutcome::Missing;
}

//===----------------------------------------------------------------------===//
// Entry points
//===----------------------------------------------------------------------===//

AttrOutcome guardjit::knownGetAttr(PyObject *Obj, PyObject *Name,
                                   PyObject **Value) {
  if (!R.ModuleFn && !R.OuterFn)
    return AttrOutcome::Unknown;
  if (!PyUnicode_CheckExact(Name))
    return AttrOutcome::Unknown;
  PyTypeObject *Tp = Py_TYPE(Obj);
  Kind K = kindOf(Tp);
  if (K == Kind::Other)
    return AttrOutcome::Unknown;
  if (!farFromRecursionLimit()) {
    ++R.Stats.Delegated;
    return AttrOutcome::Unknown;
  }
  return K == Kind::Module ? moduleRead(Obj, Name, Tp, Value)
                           : configRead(Obj, Name, Tp, Value);
}

static bool isPlainFunction(PyObject *Fn, int FreeVars, std::string *Error) {
  if (!Fn || !PyFunction_Check(Fn)) {
    *Error = "not a Python function";
    return false;
  }
  auto *Code = reinterpret_cast<PyCodeObject *>(PyFunction_GET_CODE(Fn));
  if (Code->co_argcount != 2 || Code->co_kwonlyargcount != 0 ||
      Code->co_nfreevars != FreeVars) {
    *Error = "unexpected signature or free variables";
    return false;
  }
  if (FreeVars) {
    PyObject *Closure = PyFunction_GET_CLOSURE(Fn);
    if (!Closure || !PyTuple_Check(Closure) ||
        PyTuple_GET_SIZE(Closure) != FreeVars ||
        !PyCell_Check(PyTuple_GET_ITEM(Closure, 0)) ||
        !PyCell_GET(PyTuple_GET_ITEM(Closure, 0)) ||
        !PyType_Check(PyCell_GET(PyTuple_GET_ITEM(Closure, 0)))) {
      *Error = "the __class__ cell does not hold a class";
      return false;
    }
  }
  return true;
}

bool guardjit::registerModuleGetattr(PyObject *Fn, std::string *Error) {
  if (!initRegistry(Error) || !isPlainFunction(Fn, 0, Error))
    return false;
  Py_XSETREF(R.ModuleFn, Py_NewRef(Fn));
  Py_XSETREF(R.ModuleCode, Py_NewRef(PyFunction_GET_CODE(Fn)));
  R.ModuleRaise = GlobalsMemo();
  clearTypeMemos();
  return true;
}

bool guardjit::registerConfigGetattribute(PyObject *Outer, PyObject *Inner,
                                          std::string *Error) {
  if (!initRegistry(Error) || !isPlainFunction(Outer, 1, Error) ||
      !isPlainFunction(Inner, 1, Error))
    return false;
  Py_XSETREF(R.OuterFn, Py_NewRef(Outer));
  Py_XSETREF(R.OuterCode, Py_NewRef(PyFunction_GET_CODE(Outer)));
  Py_XSETREF(R.OuterClass, Py_NewRef(classCell(Outer)));
  Py_XSETREF(R.InnerFn, Py_NewRef(Inner));
  Py_XSETREF(R.InnerCode, Py_NewRef(PyFunction_GET_CODE(Inner)));
  Py_XSETREF(R.InnerClass, Py_NewRef(classCell(Inner)));
  R.OuterSuper = R.InnerSuper = GlobalsMemo();
  clearTypeMemos();
  return true;
}

void guardjit::unregisterKnownAttrFunctions() {
  for (PyObject **P : {&R.ModuleFn, &R.ModuleCode, &R.OuterFn, &R.OuterCode,
                       &R.OuterClass, &R.InnerFn, &R.InnerCode, &R.InnerClass})
    Py_CLEAR(*P);
  clearTypeMemos();
}

KnownAttrStats guardjit::knownAttrStats() { return R.Stats; }
void guardjit::resetKnownAttrStats() { R.Stats = KnownAttrStats(); }

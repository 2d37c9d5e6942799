//===- InterpreterTest.cpp - Tests of the reference evaluator -------------===//
//
// Embeds CPython and checks interpret() on hand-made objects, one accessor or
// guard kind at a time, with the rules of docs/guard-semantics.md: a failed or
// raising read fails the check and leaves no error set, new references are
// released, epilogue lambdas run last. No torch: torch guards are exercised
// through a fake TorchHooks table.
//
//===----------------------------------------------------------------------===//
#include "guardjit/Runtime/Interpreter.h"

#include "../../../lib/Runtime/DimensionMarking.h" // private: payload sharing
#include "guardjit/Runtime/BoundGuardSet.h"
#include "guardjit/Runtime/CPythonABI.h"
#include "guardjit/Runtime/RuntimeHelpers.h"
#include "guardjit/Runtime/TorchHooks.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

using namespace guardjit;

namespace {

//===----------------------------------------------------------------------===//
// Embedded Python
//===----------------------------------------------------------------------===//

PyObject *Globals = nullptr; // __main__-like namespace for test code

class PythonEnvironment : public ::testing::Environment {
public:
  void SetUp() override {
    Py_InitializeEx(0);
    Globals = PyDict_New();
    PyDict_SetItemString(Globals, "__builtins__", PyEval_GetBuiltins());
  }
  // CPython is left initialized: finalizing with thread-local frames still
  // alive is not worth the risk in a test binary.
};

const ::testing::Environment *const Env =
    ::testing::AddGlobalTestEnvironment(new PythonEnvironment);

/// Runs statements in the shared namespace.
void exec(const char *Code) {
  PyObject *R = PyRun_String(Code, Py_file_input, Globals, Globals);
  if (!R) {
    PyErr_Print();
    FAIL() << "exec failed: " << Code;
  }
  Py_DECREF(R);
}

/// Evaluates an expression in the shared namespace. Returns a new reference.
PyObject *eval(const char *Expr) {
  PyObject *R = PyRun_String(Expr, Py_eval_input, Globals, Globals);
  if (!R) {
    PyErr_Print();
    ADD_FAILURE() << "eval failed: " << Expr;
  }
  return R;
}

/// A borrowed reference to a name in the shared namespace.
PyObject *global(const char *Name) {
  PyObject *O = PyDict_GetItemString(Globals, Name);
  EXPECT_NE(O, nullptr) << Name;
  return O;
}

/// Owns a new reference.
struct Ref {
  PyObject *P = nullptr;
  Ref() = default;
  explicit Ref(PyObject *P) : P(P) {}
  Ref(const Ref &) = delete;
  Ref &operator=(const Ref &) = delete;
  ~Ref() { Py_XDECREF(P); }
  PyObject *get() const { return P; }
  operator PyObject *() const { return P; }
};

//===----------------------------------------------------------------------===//
// Building guard sets
//===----------------------------------------------------------------------===//

class SetBuilder {
public:
  SetBuilder() : S(std::make_shared<GuardSet>("test")) {}
  ~SetBuilder() {
    for (PyObject *O : Keep)
      Py_DECREF(O);
  }

  /// Adds `O` to the object table. The builder keeps it alive for the test.
  ObjectId object(PyObject *O, bool Strong = true,
                  ObjectKind Kind = ObjectKind::Object) {
    Keep.push_back(Py_NewRef(O));
    ObjectEntry E;
    E.Kind = Kind;
    E.Strong = Strong;
    E.Address = reinterpret_cast<uintptr_t>(O);
    return S->addObject(E);
  }
  ObjectId str(const char *S) {
    Ref O(PyUnicode_InternFromString(S));
    return object(O, true, ObjectKind::Key);
  }

  ValueId value(AccessorKind Kind, ValueId Parent, ObjectId Key = InvalidId,
                int64_t Index = -1, std::string Source = "") {
    Value V;
    V.Kind = Kind;
    V.Parent = Parent;
    V.Key = Key;
    V.Index = Index;
    V.Source = std::move(Source);
    return S->addValue(V);
  }
  ValueId local(const char *Name) {
    return value(AccessorKind::FrameLocal, GuardSet::root(), str(Name), -1,
                 std::string("L['") + Name + "']");
  }
  ValueId attr(ValueId Parent, const char *Name,
               AccessorKind Kind = AccessorKind::GetAttr) {
    return value(Kind, Parent, str(Name));
  }
  ValueId keyed(AccessorKind Kind, ValueId Parent, PyObject *Key) {
    return value(Kind, Parent, object(Key, true, ObjectKind::Key));
  }
  ValueId indexed(AccessorKind Kind, ValueId Parent, int64_t Index) {
    return value(Kind, Parent, InvalidId, Index);
  }

  Guard &guard(GuardKind Kind, std::vector<ValueId> Operands,
               ObjectId Object = InvalidId, int64_t Int = 0) {
    Guard G;
    G.Kind = Kind;
    G.Operands = std::move(Operands);
    G.Object = Object;
    G.Int = Int;
    S->addGuard(G);
    return S->guards().back();
  }

  std::unique_ptr<BoundGuardSet> bind() {
    std::string Error;
    auto B = BoundGuardSet::bind(S, &Error);
    EXPECT_TRUE(B) << Error;
    EXPECT_FALSE(PyErr_Occurred());
    return B;
  }
  std::string bindError() {
    std::string Error;
    auto B = BoundGuardSet::bind(S, &Error);
    EXPECT_FALSE(B);
    EXPECT_FALSE(PyErr_Occurred());
    return Error;
  }

  GuardSet &set() { return *S; }

private:
  std::shared_ptr<GuardSet> S;
  std::vector<PyObject *> Keep;
};

/// interpret() plus the contract every call must keep: no error left set.
bool check(const BoundGuardSet &B, PyObject *Locals) {
  bool R = interpret(B, Locals);
  EXPECT_FALSE(PyErr_Occurred()) << "interpret left an error set";
  PyErr_Clear();
  return R;
}

/// Frame locals built from a Python dict expression.
Ref locals(const char *DictExpr) { return Ref(eval(DictExpr)); }

class InterpreterTest : public ::testing::Test {
protected:
  void SetUp() override {
    ASSERT_TRUE(Py_IsInitialized());
    exec(R"(
class Obj:
    pass

class Raiser:
    @property
    def bad(self):
        raise RuntimeError('boom')
    def __getattr__(self, name):
        raise RuntimeError('getattr ' + name)

class BadEq:
    def __eq__(self, other):
        raise ValueError('eq')
    __hash__ = object.__hash__

class BadBool:
    def __bool__(self):
        raise ValueError('bool')

class Slotted:
    __slots__ = ('a',)
    def __init__(self):
        self.a = 1

def raising_lambda(x):
    raise KeyError('lambda')
)");
  }
};

//===----------------------------------------------------------------------===//
// Accessors
//===----------------------------------------------------------------------===//

TEST_F(InterpreterTest, FrameLocalReadsTheLocalsDict) {
  SetBuilder SB;
  ValueId X = SB.local("x");
  Ref Three(PyLong_FromLong(3));
  SB.guard(GuardKind::EqualsMatch, {X}, SB.object(Three));
  auto B = SB.bind();
  EXPECT_TRUE(check(*B, locals("{'x': 3}")));
  EXPECT_FALSE(check(*B, locals("{'x': 4}")));
  EXPECT_FALSE(check(*B, locals("{'y': 3}"))); // unbound local
  EXPECT_FALSE(check(*B, locals("[3]")));      // not a dict: read fails
}

TEST_F(InterpreterTest, UnguardedValueMustStillBeReadable) {
  // A GetAttr accessor without guards is Dynamo's "hasattr" guard.
  SetBuilder SB;
  SB.attr(SB.local("o"), "a");
  auto B = SB.bind();
  exec("o1 = Obj(); o1.a = 1\no2 = Obj()");
  EXPECT_TRUE(check(*B, locals("{'o': o1}")));
  EXPECT_FALSE(check(*B, locals("{'o': o2}")));
}

TEST_F(InterpreterTest, GlobalsIgnoresItsParent) {
  exec("g = {'scale': 0.5, 'name': 'w'}");
  SetBuilder SB;
  ValueId G =
      SB.value(AccessorKind::Globals, GuardSet::root(),
               SB.object(global("g"), true, ObjectKind::Dict), -1, "G");
  Ref Scale(PyUnicode_FromString("scale"));
  ValueId S = SB.keyed(AccessorKind::DictGetItem, G, Scale);
  Ref Half(PyFloat_FromDouble(0.5));
  SB.guard(GuardKind::EqualsMatch, {S}, SB.object(Half));
  auto B = SB.bind();
  EXPECT_TRUE(check(*B, locals("{}")));
  exec("g['scale'] = 0.25");
  EXPECT_FALSE(check(*B, locals("{}")));
  exec("del g['scale']");
  EXPECT_FALSE(check(*B, locals("{}")));
}

TEST_F(InterpreterTest, DictGetItemUsesPyDictGetItem) {
  exec("class SubDict(dict):\n"
       "    def __getitem__(self, k): return 'overridden'\n"
       "    def __missing__(self, k): return 'missing'\n");
  SetBuilder SB;
  Ref Key(PyUnicode_FromString("k"));
  ValueId V = SB.keyed(AccessorKind::DictGetItem, SB.local("d"), Key);
  SB.guard(GuardKind::IdMatch, {V}, SB.object(Py_None, false));
  auto B = SB.bind();
  EXPECT_TRUE(check(*B, locals("{'d': {'k': None}}")));
  // __getitem__ / __missing__ of a subclass are bypassed.
  EXPECT_TRUE(check(*B, locals("{'d': SubDict(k=None)}")));
  EXPECT_FALSE(check(*B, locals("{'d': SubDict()}")));
  // Unhashable-key errors and non-dicts fail quietly.
  EXPECT_FALSE(check(*B, locals("{'d': [None]}")));
}

TEST_F(InterpreterTest, DictGetItemSwallowsRaisingKeyEquality) {
  exec("class Key:\n"
       "    def __hash__(self): return 7\n"
       "    def __eq__(self, o): raise ValueError('eq')\n"
       "k1 = Key(); k2 = Key()");
  SetBuilder SB;
  ValueId V = SB.keyed(AccessorKind::DictGetItem, SB.local("d"), global("k1"));
  auto B = SB.bind();
  EXPECT_TRUE(check(*B, locals("{'d': {k1: 1}}")));
  EXPECT_FALSE(check(*B, locals("{'d': {k2: 1}}")));
  (void)V;
}

TEST_F(InterpreterTest, GenericDictMaterializesManagedDict) {
  // 3.11 keeps plain instances' attributes in a values array; reading
  // __dict__ must create and attach the dict exactly once.
  exec("o = Obj(); o.a = 5");
  SetBuilder SB;
  ValueId D = SB.value(AccessorKind::GenericDict, SB.local("o"));
  Ref A(PyUnicode_FromString("a"));
  ValueId AV = SB.keyed(AccessorKind::DictGetItem, D, A);
  Ref Five(PyLong_FromLong(5));
  SB.guard(GuardKind::EqualsMatch, {AV}, SB.object(Five));
  auto B = SB.bind();
  Ref L = locals("{'o': o}");
  EXPECT_TRUE(check(*B, L));
  Ref Dict(eval("o.__dict__"));
  Py_ssize_t DictRefs = Py_REFCNT(Dict.get());
  for (int I = 0; I < 10; ++I)
    EXPECT_TRUE(check(*B, L));
  EXPECT_EQ(Py_REFCNT(Dict.get()), DictRefs) << "borrowed read must not leak";
  Ref Same(eval("o.__dict__ is o.__dict__"));
  EXPECT_EQ(Same.get(), Py_True);
  exec("o.a = 6");
  EXPECT_FALSE(check(*B, L));
  // Objects without a __dict__ fail.
  EXPECT_FALSE(check(*B, locals("{'o': Slotted()}")));
  EXPECT_FALSE(check(*B, locals("{'o': 5}")));
}

TEST_F(InterpreterTest, ManagedDictPreHeaderOffsets) {
  // CPythonABI.h's pre-header offsets cannot be static_asserted (the
  // internal header is C only): check them on live objects instead.
  exec("class Plain:\n    pass\np = Plain(); p.a = 1");
  Ref P(eval("p"));
  ASSERT_TRUE(Py_TYPE(P.get())->tp_flags & guardjit::abi::ManagedDictFlag);
  auto word = [&](int64_t Offset) {
    return *reinterpret_cast<PyObject **>(reinterpret_cast<char *>(P.get()) +
                                          Offset);
  };
  EXPECT_NE(word(guardjit::abi::ManagedValuesOffset), nullptr); // inline values
  EXPECT_EQ(word(guardjit::abi::ManagedDictOffset), nullptr);
  Ref Dict(eval("p.__dict__"));
  EXPECT_EQ(word(guardjit::abi::ManagedValuesOffset), nullptr);
  EXPECT_EQ(word(guardjit::abi::ManagedDictOffset), Dict.get());
  EXPECT_EQ(reinterpret_cast<PyDictObject *>(Dict.get())->ma_version_tag,
            *reinterpret_cast<uint64_t *>(reinterpret_cast<char *>(Dict.get()) +
                                          guardjit::abi::DictVersionTagOffset));
}

TEST_F(InterpreterTest, ModuleDictOffset) {
  exec("import types\nm = types.ModuleType('m')\nm.a = 1");
  Ref M(eval("m"));
  EXPECT_EQ(PyModule_Type.tp_dictoffset,
            static_cast<Py_ssize_t>(guardjit::abi::ModuleDictOffset));
  EXPECT_EQ(*reinterpret_cast<PyObject **>(reinterpret_cast<char *>(M.get()) +
                                           guardjit::abi::ModuleDictOffset),
            PyModule_GetDict(M.get()));
}

TEST_F(InterpreterTest, ModuleGetAttrFill) {
  // The JIT's module fast path: md_dict's value after a pure probe, with the
  // memo filled; a data descriptor of the module type (__dict__), a name
  // only the module's __getattr__ provides, and a module subclass take
  // gj_rt_getattr's answer and fill nothing.
  exec("import types\nm = types.ModuleType('m')\nm.a = 1\n"
       "m.__getattr__ = lambda n: 'lazy:' + n\n"
       "class Sub(types.ModuleType):\n    @property\n    def a(self): return 2\n"
       "s = Sub('s')\ns.__dict__['a'] = 1");
  Ref M(eval("m")), S(eval("s"));
  // A new reference, for the caller's Ref.
  auto fill = [&](PyObject *Mod, const char *N, DictReadCache &C) {
    Ref Name(PyUnicode_InternFromString(N));
    return gj_rt_module_getattr_fill(Mod, Name.get(), &C);
  };
  DictReadCache A;
  Ref One(fill(M.get(), "a", A));
  ASSERT_TRUE(One.get());
  EXPECT_EQ(PyLong_AsLong(One.get()), 1);
  EXPECT_EQ(A.Dict, PyModule_GetDict(M.get()));
  EXPECT_EQ(A.Value, One.get());
  DictReadCache D;
  Ref Dict(fill(M.get(), "__dict__", D));
  EXPECT_EQ(Dict.get(), PyModule_GetDict(M.get()));
  EXPECT_EQ(D.Dict, nullptr);
  DictReadCache L;
  Ref Lazy(fill(M.get(), "zz", L));
  ASSERT_TRUE(Lazy.get());
  EXPECT_STREQ(PyUnicode_AsUTF8(Lazy.get()), "lazy:zz");
  EXPECT_EQ(L.Dict, nullptr);
  DictReadCache P;
  Ref Two(fill(S.get(), "a", P));
  ASSERT_TRUE(Two.get());
  EXPECT_EQ(PyLong_AsLong(Two.get()), 2) << "the subclass's property wins";
  EXPECT_EQ(P.Dict, nullptr);
  EXPECT_FALSE(PyErr_Occurred());
}

TEST_F(InterpreterTest, DictMemoHelpers) {
  // gj_rt_dict_get_item_desc with no fused guard is the first tier's memo
  // read (hit test, else gj_rt_dict_get_item_fill); the interpreter itself
  // stays uncached, as the reference.
  Ref D(eval("{'a': 1, 'b': 2}"));
  Ref A(PyUnicode_InternFromString("a"));
  ReadDescriptor Desc;
  Desc.Key = A.get();
  DictReadCache &C = Desc.Memo;
  PyObject *One = PyDict_GetItem(D.get(), A.get());
  EXPECT_EQ(gj_rt_dict_get_item_desc(D.get(), &Desc), One);
  EXPECT_EQ(C.Dict, D.get());
  EXPECT_EQ(C.Value, One);
  uint64_t Tag = C.Tag;
  EXPECT_EQ(gj_rt_dict_get_item_desc(D.get(), &Desc), One);
  EXPECT_EQ(C.Tag, Tag);
  // Every mutation moves the tag, even one that does not touch 'a'.
  PyDict_SetItemString(D.get(), "c", One);
  EXPECT_EQ(gj_rt_dict_get_item_desc(D.get(), &Desc), One);
  EXPECT_NE(C.Tag, Tag);
  Ref Two(PyLong_FromLong(2));
  PyDict_SetItem(D.get(), A.get(), Two.get());
  EXPECT_EQ(gj_rt_dict_get_item_desc(D.get(), &Desc), Two.get());
  PyDict_DelItem(D.get(), A.get());
  EXPECT_EQ(gj_rt_dict_get_item_desc(D.get(), &Desc), nullptr);
  EXPECT_FALSE(PyErr_Occurred());
  // Misses leave the slot alone (the last hit stays, under its old tag).
  EXPECT_EQ(C.Value, Two.get());

  // A non-str key or general keys: read, not memoized.
  ReadDescriptor Desc2;
  DictReadCache &C2 = Desc2.Memo;
  Ref G(eval("{1: 'x', 'a': 3}"));
  Desc2.Key = A.get();
  EXPECT_NE(gj_rt_dict_get_item_desc(G.get(), &Desc2), nullptr);
  EXPECT_EQ(C2.Dict, nullptr);
  Ref IntKey(PyLong_FromLong(1));
  Desc2.Key = IntKey.get();
  EXPECT_NE(gj_rt_dict_get_item_desc(G.get(), &Desc2), nullptr);
  EXPECT_EQ(C2.Dict, nullptr);
  // Non-dicts read as PyDict_GetItem does (NULL, no error).
  Desc2.Key = A.get();
  EXPECT_EQ(gj_rt_dict_get_item_desc(IntKey.get(), &Desc2), nullptr);
  EXPECT_FALSE(PyErr_Occurred());

  // DICT_CONTAINS memo: only passes are recorded.
  DictReadCache C3;
  Ref B(PyUnicode_InternFromString("b"));
  EXPECT_EQ(gj_rt_dict_contains_fill(D.get(), B.get(), 0, &C3), 0);
  EXPECT_EQ(C3.Dict, nullptr);
  EXPECT_EQ(gj_rt_dict_contains_fill(D.get(), B.get(), 1, &C3), 1);
  EXPECT_EQ(C3.Dict, D.get());

  // Key / value by insertion index.
  DictReadCache C4;
  Ref Od(eval("{'x': 1, 'y': 2}"));
  EXPECT_EQ(gj_rt_dict_key_fill(Od.get(), 1, &C4),
            gj_rt_dict_key(Od.get(), 1));
  EXPECT_EQ(C4.Dict, Od.get());
  EXPECT_EQ(gj_rt_dict_value_fill(Od.get(), 5, &C4), nullptr);
}

TEST_F(InterpreterTest, GetAttrFullProtocolAndErrors) {
  exec("class WithProp:\n"
       "    @property\n"
       "    def p(self): return 11\n"
       "    def __getattr__(self, n): return 'dyn_' + n\n");
  SetBuilder SB;
  ValueId O = SB.local("o");
  ValueId P = SB.attr(O, "p");
  ValueId Z = SB.attr(O, "zz");
  Ref Eleven(PyLong_FromLong(11));
  Ref DynZ(PyUnicode_FromString("dyn_zz"));
  SB.guard(GuardKind::EqualsMatch, {P}, SB.object(Eleven));
  SB.guard(GuardKind::EqualsMatch, {Z}, SB.object(DynZ));
  auto B = SB.bind();
  EXPECT_TRUE(check(*B, locals("{'o': WithProp()}")));
  EXPECT_FALSE(check(*B, locals("{'o': Obj()}")));    // AttributeError
  EXPECT_FALSE(check(*B, locals("{'o': Raiser()}"))); // RuntimeError
}

TEST_F(InterpreterTest, GenericGetAttrBypassesGetattrHook) {
  exec("class Dyn:\n"
       "    def __getattr__(self, n): return 1\n"
       "d = Dyn(); d.real = 1");
  for (AccessorKind K : {AccessorKind::GetAttr, AccessorKind::GenericGetAttr}) {
    SetBuilder SB;
    ValueId V = SB.attr(SB.local("o"), "virtual", K);
    Ref One(PyLong_FromLong(1));
    SB.guard(GuardKind::EqualsMatch, {V}, SB.object(One));
    auto B = SB.bind();
    EXPECT_EQ(check(*B, locals("{'o': d}")), K == AccessorKind::GetAttr);
  }
  SetBuilder SB;
  SB.attr(SB.local("o"), "real", AccessorKind::GenericGetAttr);
  auto B = SB.bind();
  EXPECT_TRUE(check(*B, locals("{'o': d}")));
}

TEST_F(InterpreterTest, NewReferencesAreReleased) {
  // The property and __getitem__ return the same long-lived object, so any
  // leaked reference from GetAttr / GetItem / GenericGetAttr shows up in its
  // refcount.
  exec("payload = Obj()\n"
       "class Src:\n"
       "    @property\n"
       "    def p(self): return payload\n"
       "    def __getitem__(self, k): return payload\n"
       "src = Src(); src.direct = payload");
  PyObject *Payload = global("payload");
  SetBuilder SB;
  ValueId S = SB.local("s");
  ValueId P = SB.attr(S, "p");
  ValueId D = SB.attr(S, "direct", AccessorKind::GenericGetAttr);
  Ref Zero(PyLong_FromLong(0));
  ValueId I = SB.keyed(AccessorKind::GetItem, S, Zero);
  ValueId T = SB.value(AccessorKind::Type, P);
  ObjectId ObjType = SB.object(global("Obj"), false, ObjectKind::Type);
  SB.guard(GuardKind::IdMatch, {P}, SB.object(Payload, false));
  SB.guard(GuardKind::IdMatch, {D}, SB.object(Payload, false));
  SB.guard(GuardKind::IdMatch, {I}, SB.object(Payload, false));
  SB.guard(GuardKind::IdMatch, {T}, ObjType);
  auto B = SB.bind();
  Ref L = locals("{'s': src}");
  Py_ssize_t Before = Py_REFCNT(Payload);
  for (int N = 0; N < 100; ++N)
    EXPECT_TRUE(check(*B, L));
  EXPECT_EQ(Py_REFCNT(Payload), Before);
  // Failing checks release what was read before the failure, too.
  SetBuilder SB2;
  ValueId S2 = SB2.local("s");
  ValueId P2 = SB2.attr(S2, "p");
  SB2.guard(GuardKind::IdMatch, {P2}, SB2.object(Payload, false));
  SB2.guard(GuardKind::NoneMatch, {P2});
  auto B2 = SB2.bind();
  Py_ssize_t Before2 = Py_REFCNT(Payload); // SB2 keeps one more reference
  for (int N = 0; N < 100; ++N)
    EXPECT_FALSE(check(*B2, L));
  EXPECT_EQ(Py_REFCNT(Payload), Before2);
}

TEST_F(InterpreterTest, CodeUnwrapsMethods) {
  exec("def f(a): return a\n"
       "class C:\n"
       "    def m(self): pass\n"
       "c = C()");
  Ref FCode(eval("f.__code__"));
  Ref MCode(eval("C.m.__code__"));
  SetBuilder SB;
  ValueId Code = SB.value(AccessorKind::Code, SB.local("fn"));
  ObjectId FC = SB.object(FCode, false);
  SB.guard(GuardKind::IdMatch, {Code}, FC);
  auto B = SB.bind();
  EXPECT_TRUE(check(*B, locals("{'fn': f}")));
  EXPECT_FALSE(check(*B, locals("{'fn': c.m}")));
  EXPECT_FALSE(check(*B, locals("{'fn': len}"))); // builtin: no __code__
  EXPECT_FALSE(check(*B, locals("{'fn': 3}")));

  SetBuilder SB2;
  ValueId Code2 = SB2.value(AccessorKind::Code, SB2.local("fn"));
  SB2.guard(GuardKind::IdMatch, {Code2}, SB2.object(MCode, false));
  auto B2 = SB2.bind();
  EXPECT_TRUE(check(*B2, locals("{'fn': c.m}"))); // bound method unwrapped
  EXPECT_TRUE(check(*B2, locals("{'fn': C.m}")));
}

TEST_F(InterpreterTest, TypeAccessor) {
  SetBuilder SB;
  ValueId T = SB.value(AccessorKind::Type, SB.local("x"));
  SB.guard(GuardKind::IdMatch, {T},
           SB.object(reinterpret_cast<PyObject *>(&PyFloat_Type), false));
  auto B = SB.bind();
  EXPECT_TRUE(check(*B, locals("{'x': 1.5}")));
  EXPECT_FALSE(check(*B, locals("{'x': 1}")));
}

TEST_F(InterpreterTest, TupleAndListGetItem) {
  for (AccessorKind K : {AccessorKind::TupleGetItem, AccessorKind::ListGetItem}) {
    bool IsTuple = K == AccessorKind::TupleGetItem;
    for (int64_t Index : {1, 3, -1}) {
      SetBuilder SB;
      ValueId V = SB.indexed(K, SB.local("s"), Index);
      SB.guard(GuardKind::NotNone, {V});
      auto B = SB.bind();
      bool InRange = Index == 1;
      EXPECT_EQ(check(*B, locals("{'s': (0, 'a', 2)}")), IsTuple && InRange)
          << spelling(K).data() << " " << Index;
      EXPECT_EQ(check(*B, locals("{'s': [0, 'a', 2]}")), !IsTuple && InRange)
          << spelling(K).data() << " " << Index;
      EXPECT_FALSE(check(*B, locals("{'s': 'abc'}")));
    }
  }
}

TEST_F(InterpreterTest, GetItemFullProtocol) {
  exec("class Bad:\n"
       "    def __getitem__(self, k): raise IndexError(k)\n");
  SetBuilder SB;
  Ref One(PyLong_FromLong(1));
  ValueId V = SB.keyed(AccessorKind::GetItem, SB.local("s"), One);
  Ref B1(PyUnicode_FromString("b"));
  SB.guard(GuardKind::EqualsMatch, {V}, SB.object(B1));
  auto B = SB.bind();
  EXPECT_TRUE(check(*B, locals("{'s': ['a', 'b']}")));
  EXPECT_TRUE(check(*B, locals("{'s': {1: 'b'}}")));
  EXPECT_TRUE(check(*B, locals("{'s': 'ab'}")));
  EXPECT_FALSE(check(*B, locals("{'s': ['a']}")));
  EXPECT_FALSE(check(*B, locals("{'s': Bad()}")));
  EXPECT_FALSE(check(*B, locals("{'s': 5}")));
}

TEST_F(InterpreterTest, DictKeyAndValueFollowIterationOrder) {
  Ref KeyB(PyUnicode_FromString("b"));
  Ref Two(PyLong_FromLong(2));
  SetBuilder SB;
  ValueId D = SB.local("d");
  ValueId K1 = SB.indexed(AccessorKind::DictKey, D, 1);
  ValueId V1 = SB.indexed(AccessorKind::DictValue, D, 1);
  SB.guard(GuardKind::EqualsMatch, {K1}, SB.object(KeyB));
  SB.guard(GuardKind::EqualsMatch, {V1}, SB.object(Two));
  auto B = SB.bind();
  EXPECT_TRUE(check(*B, locals("{'d': {'a': 1, 'b': 2, 'c': 3}}")));
  EXPECT_FALSE(check(*B, locals("{'d': {'b': 2, 'a': 1}}"))); // reordered
  // Index = the i-th *live* item: deleted slots are skipped.
  exec("dd = {'x': 0, 'a': 1, 'b': 2}\ndel dd['x']\ndd['c'] = 3");
  EXPECT_TRUE(check(*B, locals("{'d': dd}"))); // a, b, c (slot 1 holds a)
  exec("dd2 = {'x': 0, 'y': 5, 'a': 1, 'b': 2}\ndel dd2['y']");
  EXPECT_FALSE(check(*B, locals("{'d': dd2}"))); // x, a, b: index 1 is a
  exec("dd3 = {'z': 0, 'b': 2, 'x': 9}\ndel dd3['z']\ndd3['q'] = 0");
  EXPECT_FALSE(check(*B, locals("{'d': dd3}"))); // b, x, q
  EXPECT_FALSE(check(*B, locals("{'d': {'a': 1}}"))); // out of range
  EXPECT_FALSE(check(*B, locals("{'d': ['a', 'b']}"))); // not a dict
}

//===----------------------------------------------------------------------===//
// Leaf guards
//===----------------------------------------------------------------------===//

TEST_F(InterpreterTest, IdentityGuards) {
  exec("sentinel = Obj()");
  PyObject *Sentinel = global("sentinel");
  struct Case {
    GuardKind Kind;
    const char *Pass;
    const char *Fail;
  } Cases[] = {
      {GuardKind::TypeMatch, "{'x': Obj()}", "{'x': 1}"},
      {GuardKind::IdMatch, "{'x': sentinel}", "{'x': Obj()}"},
      {GuardKind::NoneMatch, "{'x': None}", "{'x': 0}"},
      {GuardKind::TrueMatch, "{'x': True}", "{'x': 1}"},
      {GuardKind::FalseMatch, "{'x': False}", "{'x': 0}"},
      {GuardKind::NotNone, "{'x': 0}", "{'x': None}"},
  };
  for (const Case &C : Cases) {
    SetBuilder SB;
    ObjectId O = InvalidId;
    if (C.Kind == GuardKind::TypeMatch)
      O = SB.object(global("Obj"), false, ObjectKind::Type);
    if (C.Kind == GuardKind::IdMatch)
      O = SB.object(Sentinel, false);
    SB.guard(C.Kind, {SB.local("x")}, O);
    auto B = SB.bind();
    EXPECT_TRUE(check(*B, locals(C.Pass))) << torchName(C.Kind).data();
    EXPECT_FALSE(check(*B, locals(C.Fail))) << torchName(C.Kind).data();
  }
  // TYPE_MATCH is exact: a subclass instance fails.
  exec("class SubObj(Obj): pass");
  SetBuilder SB;
  SB.guard(GuardKind::TypeMatch, {SB.local("x")},
           SB.object(global("Obj"), false, ObjectKind::Type));
  auto B = SB.bind();
  EXPECT_FALSE(check(*B, locals("{'x': SubObj()}")));
}

TEST_F(InterpreterTest, EqualsMatchRules) {
  exec("nan = float('nan')\nbe = BadEq()");
  auto equalsSet = [](SetBuilder &SB, PyObject *Constant) {
    SB.guard(GuardKind::EqualsMatch, {SB.local("x")},
             SB.object(Constant, true, ObjectKind::Constant));
    return SB.bind();
  };
  {
    SetBuilder SB;
    Ref One(PyLong_FromLong(1));
    auto B = equalsSet(SB, One);
    EXPECT_TRUE(check(*B, locals("{'x': 1}")));
    EXPECT_FALSE(check(*B, locals("{'x': True}"))); // exact type
    EXPECT_FALSE(check(*B, locals("{'x': 1.0}")));
    EXPECT_FALSE(check(*B, locals("{'x': 2}")));
  }
  {
    // Pointer fast path: the same NaN object passes, another NaN fails.
    SetBuilder SB;
    auto B = equalsSet(SB, global("nan"));
    EXPECT_TRUE(check(*B, locals("{'x': nan}")));
    EXPECT_FALSE(check(*B, locals("{'x': float('nan')}")));
  }
  {
    // A raising __eq__ fails without leaving the error set; the same object
    // passes without calling __eq__.
    SetBuilder SB;
    auto B = equalsSet(SB, global("be"));
    EXPECT_TRUE(check(*B, locals("{'x': be}")));
    EXPECT_FALSE(check(*B, locals("{'x': BadEq()}")));
  }
  {
    SetBuilder SB;
    Ref S(PyUnicode_FromString("relu"));
    auto B = equalsSet(SB, S);
    EXPECT_TRUE(check(*B, locals("{'x': ''.join(['re', 'lu'])}")));
    EXPECT_FALSE(check(*B, locals("{'x': 'gelu'}")));
  }
}

TEST_F(InterpreterTest, LengthCheck) {
  SetBuilder SB;
  SB.guard(GuardKind::LengthCheck, {SB.local("x")}, InvalidId, 2);
  auto B = SB.bind();
  EXPECT_TRUE(check(*B, locals("{'x': [1, 2]}")));
  EXPECT_TRUE(check(*B, locals("{'x': (1, 2)}")));
  EXPECT_TRUE(check(*B, locals("{'x': 'ab'}")));
  EXPECT_FALSE(check(*B, locals("{'x': [1]}")));
  // Dicts and ints are not sequences; the TypeError is cleared.
  EXPECT_FALSE(check(*B, locals("{'x': {1: 1, 2: 2}}")));
  EXPECT_FALSE(check(*B, locals("{'x': 2}")));
}

TEST_F(InterpreterTest, DictLength) {
  exec("class D2(dict): pass");
  SetBuilder SB;
  SB.guard(GuardKind::DictLength, {SB.local("x")}, InvalidId, 2);
  auto B = SB.bind();
  EXPECT_TRUE(check(*B, locals("{'x': {1: 1, 2: 2}}")));
  EXPECT_TRUE(check(*B, locals("{'x': D2(a=1, b=2)}"))); // subclass accepted
  EXPECT_FALSE(check(*B, locals("{'x': {}}")));
  EXPECT_FALSE(check(*B, locals("{'x': [1, 2]}")));
}

TEST_F(InterpreterTest, DictContains) {
  Ref Key(PyUnicode_FromString("forward"));
  for (int Expected : {0, 1}) {
    SetBuilder SB;
    SB.guard(GuardKind::DictContains, {SB.local("d")}, SB.object(Key),
             Expected);
    auto B = SB.bind();
    EXPECT_EQ(check(*B, locals("{'d': {'forward': 1}}")), Expected == 1);
    EXPECT_EQ(check(*B, locals("{'d': {'other': 1}}")), Expected == 0);
    // A non-dict "does not contain".
    EXPECT_EQ(check(*B, locals("{'d': ['forward']}")), Expected == 0);
  }
  // Dynamo's `PyDict_Check(v) && PyDict_Contains(v, k)` turns an error
  // (unhashable key) into "contains".
  Ref Unhashable(eval("[1]"));
  for (int Expected : {0, 1}) {
    SetBuilder SB;
    SB.guard(GuardKind::DictContains, {SB.local("d")}, SB.object(Unhashable),
             Expected);
    auto B = SB.bind();
    EXPECT_EQ(check(*B, locals("{'d': {'a': 1}}")), Expected == 1);
  }
}

TEST_F(InterpreterTest, NoHasAttr) {
  SetBuilder SB;
  SB.guard(GuardKind::NoHasAttr, {SB.local("o")}, SB.str("_dynamo_dynamic_indices"));
  auto B = SB.bind();
  exec("marked = Obj(); marked._dynamo_dynamic_indices = {0}");
  EXPECT_TRUE(check(*B, locals("{'o': Obj()}")));
  EXPECT_FALSE(check(*B, locals("{'o': marked}")));
  // A __getattr__ raising RuntimeError counts as absent (HasAttr swallows).
  EXPECT_TRUE(check(*B, locals("{'o': Raiser()}")));
}

TEST_F(InterpreterTest, LambdaGuard) {
  SetBuilder SB;
  ValueId X = SB.local("x");
  Ref Fn(eval("lambda v: v"));
  SB.guard(GuardKind::Lambda, {X}, SB.object(Fn, true, ObjectKind::Callable));
  auto B = SB.bind();
  EXPECT_TRUE(check(*B, locals("{'x': 'nonempty'}")));
  EXPECT_FALSE(check(*B, locals("{'x': []}")));
  // __bool__ raising: Dynamo's `bool r = PyObject_IsTrue(x)` is true.
  EXPECT_TRUE(check(*B, locals("{'x': BadBool()}")));

  SetBuilder SB2;
  SB2.guard(GuardKind::Lambda, {SB2.local("x")},
            SB2.object(global("raising_lambda"), true, ObjectKind::Callable));
  auto B2 = SB2.bind();
  EXPECT_FALSE(check(*B2, locals("{'x': 1}")));
}

TEST_F(InterpreterTest, EpilogueRunsLastOnFrameLocals) {
  exec("log = []\n"
       "def leaf(v):\n"
       "    log.append(('leaf', v))\n"
       "    return True\n"
       "def epilogue(L):\n"
       "    log.append(('epilogue', sorted(L)))\n"
       "    return L['x'] == 1\n");
  SetBuilder SB;
  // The epilogue comes first in the IR but must run after every other guard.
  SB.guard(GuardKind::EpilogueLambda, {},
           SB.object(global("epilogue"), true, ObjectKind::Callable));
  ValueId X = SB.local("x");
  SB.guard(GuardKind::Lambda, {X},
           SB.object(global("leaf"), true, ObjectKind::Callable));
  auto B = SB.bind();
  EXPECT_TRUE(check(*B, locals("{'x': 1, 'y': 2}")));
  Ref Log1(eval("log == [('leaf', 1), ('epilogue', ['x', 'y'])]"));
  EXPECT_EQ(Log1.get(), Py_True);
  exec("log.clear()");
  EXPECT_FALSE(check(*B, locals("{'x': 2}")));
  // Not run at all when an earlier guard (here an unreadable value) fails.
  exec("log.clear()");
  EXPECT_FALSE(check(*B, locals("{'y': 2}")));
  Ref Log2(eval("log == []"));
  EXPECT_EQ(Log2.get(), Py_True);
  // A raising epilogue fails.
  SetBuilder SB2;
  SB2.guard(GuardKind::EpilogueLambda, {},
            SB2.object(global("raising_lambda"), true, ObjectKind::Callable));
  auto B2 = SB2.bind();
  EXPECT_FALSE(check(*B2, locals("{}")));
}

TEST_F(InterpreterTest, NoTensorAliasingIsIdentity) {
  exec("a = Obj(); b = Obj()\nmany = [Obj() for _ in range(40)]");
  SetBuilder SB;
  ValueId X = SB.local("x"), Y = SB.local("y"), Z = SB.local("z");
  SB.guard(GuardKind::NoTensorAliasing, {X, Y, Z});
  auto B = SB.bind();
  EXPECT_TRUE(check(*B, locals("{'x': a, 'y': b, 'z': Obj()}")));
  EXPECT_FALSE(check(*B, locals("{'x': a, 'y': b, 'z': a}")));
  EXPECT_FALSE(check(*B, locals("{'x': a, 'y': a, 'z': b}")));
  EXPECT_FALSE(check(*B, locals("{'x': a, 'y': b}"))); // unreadable operand

  // The sorted path for large operand lists.
  SetBuilder SB2;
  ValueId M = SB2.local("m");
  std::vector<ValueId> Ops;
  for (int I = 0; I < 40; ++I)
    Ops.push_back(SB2.indexed(AccessorKind::ListGetItem, M, I));
  SB2.guard(GuardKind::NoTensorAliasing, Ops);
  auto B2 = SB2.bind();
  EXPECT_TRUE(check(*B2, locals("{'m': many}")));
  EXPECT_FALSE(check(*B2, locals("{'m': many[:39] + [many[3]]}")));
}

TEST_F(InterpreterTest, DefaultDevice) {
  exec("devmod = {'CURRENT_DEVICE': None}\n"
       "class Dev:\n"
       "    def __init__(self, n): self.n = n\n"
       "    def __eq__(self, o): return isinstance(o, Dev) and o.n == self.n\n"
       "class BadDev:\n"
       "    def __eq__(self, o): raise ValueError('eq')\n");
  SetBuilder SB;
  Guard &G = SB.guard(GuardKind::DefaultDevice, {},
                      SB.object(Py_None, true, ObjectKind::State));
  G.Aux = SB.object(global("devmod"), true, ObjectKind::Dict);
  auto B = SB.bind();
  EXPECT_TRUE(check(*B, locals("{}")));
  exec("devmod['CURRENT_DEVICE'] = Dev('cpu')");
  EXPECT_FALSE(check(*B, locals("{}")));
  exec("devmod['CURRENT_DEVICE'] = BadDev()");
  EXPECT_FALSE(check(*B, locals("{}")));
  exec("del devmod['CURRENT_DEVICE']");
  EXPECT_FALSE(check(*B, locals("{}")));

  // == is used when the objects differ.
  exec("expected_dev = Dev('meta')\ndevmod['CURRENT_DEVICE'] = Dev('meta')");
  SetBuilder SB2;
  Guard &G2 = SB2.guard(GuardKind::DefaultDevice, {},
                        SB2.object(global("expected_dev"), true,
                                   ObjectKind::State));
  G2.Aux = SB2.object(global("devmod"), true, ObjectKind::Dict);
  auto B2 = SB2.bind();
  EXPECT_TRUE(check(*B2, locals("{}")));
  exec("devmod['CURRENT_DEVICE'] = Dev('cuda')");
  EXPECT_FALSE(check(*B2, locals("{}")));
}

TEST_F(InterpreterTest, DimensionMarking) {
  exec("spec = ({'_dynamo_dynamic_indices': {0, 1}}, "
       "['_dynamo_static_indices'], {})\n"
       "def marked(**attrs):\n"
       "    o = Obj()\n"
       "    for k, v in attrs.items(): setattr(o, k, v)\n"
       "    return o\n");
  SetBuilder SB;
  SB.guard(GuardKind::DimensionMarking, {SB.local("t")},
           SB.object(global("spec"), true, ObjectKind::Constant));
  auto B = SB.bind();
  auto run = [&](const char *Expr) {
    std::string L = std::string("{'t': ") + Expr + "}";
    return check(*B, locals(L.c_str()));
  };
  // No gate attribute: nothing else is looked at.
  EXPECT_TRUE(run("Obj()"));
  EXPECT_TRUE(run("marked(_dynamo_static_indices={0})"));
  // Gate present (any value): subset rule and absent attributes.
  EXPECT_TRUE(run("marked(_has_dynamo_dim_marking=True, "
                  "_dynamo_dynamic_indices={0, 1})"));
  EXPECT_TRUE(run("marked(_has_dynamo_dim_marking=False, "
                  "_dynamo_dynamic_indices={0})"));
  EXPECT_TRUE(run("marked(_has_dynamo_dim_marking=None)"));
  EXPECT_FALSE(run("marked(_has_dynamo_dim_marking=True, "
                   "_dynamo_dynamic_indices={2})"));
  EXPECT_FALSE(run("marked(_has_dynamo_dim_marking=True, "
                   "_dynamo_dynamic_indices={0}, _dynamo_static_indices={0})"));
  // An attribute without issubset: Dynamo raises, we fail quietly.
  EXPECT_FALSE(run("marked(_has_dynamo_dim_marking=True, "
                   "_dynamo_dynamic_indices=[0])"));
  EXPECT_TRUE(run("marked(_has_dynamo_dim_marking=True, "
                  "_dynamo_dynamic_indices=frozenset({1}))"));

  // Compiled without markings: a marked runtime value fails.
  exec("spec_none = ({}, ['_dynamo_dynamic_indices'], {})");
  SetBuilder SB2;
  SB2.guard(GuardKind::DimensionMarking, {SB2.local("t")},
            SB2.object(global("spec_none"), true, ObjectKind::Constant));
  auto B2 = SB2.bind();
  EXPECT_TRUE(check(*B2, locals("{'t': Obj()}")));
  EXPECT_FALSE(check(*B2, locals("{'t': marked(_has_dynamo_dim_marking=1)}")));

  // Dependent attributes are compared only when their gate is present.
  exec("spec_dep = ({'_dynamo_unbacked_indices': {0}}, [], "
       "{'_dynamo_shape_ids': ({0: 'batch'}, '_dynamo_unbacked_indices'), "
       "'_dynamo_unbacked_bounds': (None, '_dynamo_unbacked_indices')})");
  SetBuilder SB3;
  SB3.guard(GuardKind::DimensionMarking, {SB3.local("t")},
            SB3.object(global("spec_dep"), true, ObjectKind::Constant));
  auto B3 = SB3.bind();
  auto run3 = [&](const char *Expr) {
    std::string L = std::string("{'t': ") + Expr + "}";
    return check(*B3, locals(L.c_str()));
  };
  EXPECT_TRUE(run3("marked(_has_dynamo_dim_marking=True, "
                   "_dynamo_shape_ids={0: 'other'})")); // gate absent
  EXPECT_TRUE(run3("marked(_has_dynamo_dim_marking=True, "
                   "_dynamo_unbacked_indices={0}, "
                   "_dynamo_shape_ids={0: 'batch'})"));
  EXPECT_FALSE(run3("marked(_has_dynamo_dim_marking=True, "
                    "_dynamo_unbacked_indices={0}, "
                    "_dynamo_shape_ids={0: 'other'})"));
  EXPECT_FALSE(run3("marked(_has_dynamo_dim_marking=True, "
                    "_dynamo_unbacked_indices={0})")); // absent != {0: 'batch'}
  EXPECT_FALSE(run3("marked(_has_dynamo_dim_marking=True, "
                    "_dynamo_unbacked_indices={0}, "
                    "_dynamo_shape_ids={0: 'batch'}, "
                    "_dynamo_unbacked_bounds={0: (1, 2)})")); // None expected

  // The payload keeps the compile-time set object (Dynamo does not copy).
  exec("spec[0]['_dynamo_dynamic_indices'].add(2)");
  EXPECT_TRUE(run("marked(_has_dynamo_dim_marking=True, "
                  "_dynamo_dynamic_indices={2})"));
}

TEST_F(InterpreterTest, IdenticalUnmarkedDimensionSpecsShareOnePayload) {
  // One DIMENSION_DYNAMIC_MARKING per tensor, nearly all unmarked and
  // identical: bind gives them one payload (fewer lines in a cold check);
  // a marked spec keeps its own. The answers are each guard's.
  exec("u1 = ({}, ['_dynamo_dynamic_indices', '_dynamo_static_indices'], {})\n"
       "u2 = ({}, ['_dynamo_dynamic_indices', '_dynamo_static_indices'], {})\n"
       "u3 = ({}, ['_dynamo_static_indices'], {})\n"
       "m1 = ({'_dynamo_dynamic_indices': {0}}, ['_dynamo_static_indices'], {})\n"
       "def gated(**attrs):\n"
       "    o = Obj()\n"
       "    o._has_dynamo_dim_marking = True\n"
       "    for k, v in attrs.items(): setattr(o, k, v)\n"
       "    return o\n");
  SetBuilder SB;
  for (const char *Spec : {"u1", "u2", "u3", "m1"})
    SB.guard(GuardKind::DimensionMarking,
             {SB.local((std::string("t_") + Spec).c_str())},
             SB.object(global(Spec), true, ObjectKind::Constant));
  auto B = SB.bind();
  // Each guard has its own slot (its dict memo) over a shared spec.
  auto Spec = [&](size_t I) {
    return static_cast<const DimensionMarkingSlot *>(B->payload(I))->Spec;
  };
  EXPECT_NE(B->payload(0), B->payload(1));
  EXPECT_EQ(Spec(0), Spec(1));
  EXPECT_EQ(Spec(0)->Refs, 2u);
  EXPECT_NE(Spec(0), Spec(2)); // other absent names
  EXPECT_NE(Spec(0), Spec(3)); // marked
  auto run = [&](const char *A, const char *C, const char *D, const char *E) {
    std::string L = std::string("{'t_u1': ") + A + ", 't_u2': " + C +
                    ", 't_u3': " + D + ", 't_m1': " + E + "}";
    return check(*B, locals(L.c_str()));
  };
  EXPECT_TRUE(run("Obj()", "Obj()", "Obj()", "Obj()"));
  // Sharing never mixes up the answers: each slot fails on its own.
  EXPECT_FALSE(run("Obj()", "gated()", "Obj()", "Obj()"));
  EXPECT_FALSE(run("gated()", "Obj()", "Obj()", "Obj()"));
  EXPECT_TRUE(run("Obj()", "Obj()", "Obj()",
                  "gated(_dynamo_dynamic_indices={0})"));
  EXPECT_FALSE(run("Obj()", "Obj()", "Obj()",
                   "gated(_dynamo_dynamic_indices={1})"));
}

TEST_F(InterpreterTest, DimensionMarkingGateLookupMatchesHasattr) {
  // With no markings compiled in, the guard is exactly
  // `not hasattr(t, '_has_dynamo_dim_marking')`: exercise every branch of the
  // fast gate lookup (and its per-guard type memo) against hasattr itself.
  exec("spec_gate = ({}, [], {})\n"
       "G = '_has_dynamo_dim_marking'\n"
       "class Base:\n"
       "    pass\n"
       "class Sub(Base):\n"
       "    pass\n"
       "class WithGetattr:\n"
       "    def __getattr__(self, name):\n"
       "        if name == G: return 1\n"
       "        raise AttributeError(name)\n"
       "class Err(Exception):\n"
       "    pass\n"
       "class Slot:\n"
       "    __slots__ = (G,)\n"
       "class Prop:\n"
       "    @property\n"
       "    def _has_dynamo_dim_marking(self):\n"
       "        raise AttributeError('no')\n"
       "class Coll:\n"
       "    def __hash__(self): return hash(G)\n"
       "    def __eq__(self, other): raise ValueError('eq')\n"
       "def with_dict(o, **kw):\n"
       "    o.__dict__.update(kw)\n"
       "    return o\n"
       "def with_values(o, **kw):\n"
       "    for k, v in kw.items(): setattr(o, k, v)\n"
       "    return o\n");
  SetBuilder SB;
  SB.guard(GuardKind::DimensionMarking, {SB.local("t")},
           SB.object(global("spec_gate"), true, ObjectKind::Constant));
  auto B = SB.bind();
  auto agree = [&](const char *Setup, const char *Expr) {
    SCOPED_TRACE(std::string(Setup) + " / " + Expr);
    exec(Setup);
    std::string Has = std::string("hasattr(") + Expr + ", G)";
    Ref Present(eval(Has.c_str()));
    std::string L = std::string("{'t': ") + Expr + "}";
    Ref Locals(eval(L.c_str()));
    for (int I = 0; I < 2; ++I) // second time through the type memo
      EXPECT_EQ(check(*B, Locals), Present.get() == Py_False);
  };
  agree("b = Base()", "b");
  agree("b = with_dict(Base())", "b");
  agree("b = with_dict(Base(), _has_dynamo_dim_marking=0)", "b");
  agree("b = with_values(Base(), _has_dynamo_dim_marking=None)", "b");
  agree("b = Base()", "b");
  // The instance-dict memo must not survive a write to that dict.
  agree("b = with_dict(Base(), x=1)", "b");
  agree("b.__dict__[G] = 0", "b");
  agree("del b.__dict__[G]", "b");
  agree("b._has_dynamo_dim_marking = None", "b");
  agree("b.__dict__.clear()", "b");
  agree("b.__dict__ = {G: 1}", "b");
  // The type memo must not survive a change of the class or of a base.
  agree("Base._has_dynamo_dim_marking = False", "Base()");
  agree("del Base._has_dynamo_dim_marking", "Base()");
  agree("pass", "Sub()");
  agree("Base._has_dynamo_dim_marking = True", "Sub()");
  agree("del Base._has_dynamo_dim_marking", "Sub()");
  agree("Sub._has_dynamo_dim_marking = 1", "with_dict(Sub())");
  agree("del Sub._has_dynamo_dim_marking", "with_dict(Sub())");
  // Not the generic getattr, descriptors, other dict layouts.
  agree("pass", "WithGetattr()");
  agree("e = Err()", "e");
  agree("e._has_dynamo_dim_marking = 1", "e");
  agree("s = Slot()", "s");
  agree("setattr(s, G, 1)", "s");
  agree("pass", "Prop()");
  agree("pass", "5");
  agree("pass", "Base");
  // A raising key in the instance dict: Python's hasattr() raises, the C
  // PyObject_HasAttr the guard has always used says "absent" -> pass.
  exec("c = with_dict(Base()); c.__dict__[Coll()] = 1");
  for (int I = 0; I < 2; ++I)
    EXPECT_TRUE(check(*B, locals("{'t': c}")));
}

//===----------------------------------------------------------------------===//
// Binding
//===----------------------------------------------------------------------===//

TEST_F(InterpreterTest, BindHoldsStrongReferencesOnly) {
  exec("strong = Obj(); weak = Obj()");
  PyObject *Strong = global("strong");
  PyObject *Weak = global("weak");
  Py_ssize_t S0 = Py_REFCNT(Strong), W0 = Py_REFCNT(Weak);
  {
    // Objects entered directly, without SetBuilder's keep-alive references.
    auto Set = std::make_shared<GuardSet>();
    ObjectEntry E;
    E.Strong = true;
    E.Address = reinterpret_cast<uintptr_t>(Strong);
    Set->addObject(E);
    E.Strong = false;
    E.Address = reinterpret_cast<uintptr_t>(Weak);
    Set->addObject(E);
    std::string Error;
    auto B = BoundGuardSet::bind(Set, &Error);
    ASSERT_TRUE(B) << Error;
    EXPECT_EQ(Py_REFCNT(Strong), S0 + 1);
    EXPECT_EQ(Py_REFCNT(Weak), W0);
    EXPECT_EQ(B->object(0), Strong);
    EXPECT_EQ(B->object(1), Weak);
    EXPECT_FALSE(B->needsLocalState());
  }
  EXPECT_EQ(Py_REFCNT(Strong), S0);
  EXPECT_EQ(Py_REFCNT(Weak), W0);
}

TEST_F(InterpreterTest, BindErrorsNameTheSource) {
  {
    SetBuilder SB;
    ObjectEntry Unbound;
    Unbound.Repr = "<class 'Foo'>";
    ObjectId O = SB.set().addObject(Unbound);
    ValueId X = SB.local("x");
    SB.guard(GuardKind::TypeMatch, {X}, O);
    std::string Err = SB.bindError();
    EXPECT_NE(Err.find("unbound"), std::string::npos) << Err;
    EXPECT_NE(Err.find("L['x']"), std::string::npos) << Err;
    EXPECT_NE(Err.find("TYPE_MATCH"), std::string::npos) << Err;
  }
  {
    SetBuilder SB;
    SB.guard(GuardKind::NoneMatch, {}); // a leaf guard needs one operand
    EXPECT_NE(SB.bindError().find("operand"), std::string::npos);
  }
  {
    // GetAttr with a non-str name.
    SetBuilder SB;
    Ref Five(PyLong_FromLong(5));
    SB.value(AccessorKind::GetAttr, SB.local("x"), SB.object(Five));
    EXPECT_NE(SB.bindError().find("str"), std::string::npos);
  }
  {
    SetBuilder SB;
    setTorchHooks(nullptr);
    Guard &G = SB.guard(GuardKind::GlobalState, {});
    G.Str = "{}";
    G.Attrs.Source = "global state";
    std::string Err = SB.bindError();
    EXPECT_NE(Err.find("TorchHooks"), std::string::npos) << Err;
    EXPECT_NE(Err.find("GLOBAL_STATE"), std::string::npos) << Err;
  }
  {
    SetBuilder SB;
    exec("bad_spec = ({'a': {0}}, 5, {})");
    SB.guard(GuardKind::DimensionMarking, {SB.local("t")},
             SB.object(global("bad_spec")));
    std::string Err = SB.bindError();
    EXPECT_NE(Err.find("absent_attrs"), std::string::npos) << Err;
    EXPECT_NE(Err.find("L['t']"), std::string::npos) << Err;
  }
}

//===----------------------------------------------------------------------===//
// Torch guards through a fake TorchHooks table
//===----------------------------------------------------------------------===//

struct FakeTorch {
  static inline int Reads = 0, Prepared = 0, Released = 0;
  static inline bool GlobalOk = true;
  static inline LocalState Current{0x10, 0x1};

  static void readLocalState(LocalState *S) {
    ++Reads;
    *S = Current;
  }
  /// Payload: the expected key set; the "tensor" is a Python int.
  static int tensorMatch(PyObject *V, const void *P, const LocalState *S) {
    if (!PyLong_Check(V))
      return 0;
    uint64_t Keys = (PyLong_AsUnsignedLongLong(V) | S->Included) & ~S->Excluded;
    return Keys == *static_cast<const uint64_t *>(P);
  }
  static int globalState(const void *) { return GlobalOk; }
  static int modeStack(const void *P) { return P != nullptr; }
  static void *prepare(const GuardSet &Set, const Guard &G,
                       PyObject *const *, std::string *Error) {
    ++Prepared;
    if (G.Kind == GuardKind::TensorMatch)
      return new uint64_t(Set.tensorSpec(G.Tensor).DispatchKeys);
    if (G.Str == "refuse") {
      *Error = "refused";
      return nullptr;
    }
    return new uint64_t(0);
  }
  static void release(const Guard &, void *P) {
    ++Released;
    delete static_cast<uint64_t *>(P);
  }
  static constexpr TorchHooks Table = {readLocalState, tensorMatch,
                                       globalState,    modeStack,
                                       prepare,        release};
};

class TorchHooksTest : public InterpreterTest {
protected:
  void SetUp() override {
    InterpreterTest::SetUp();
    FakeTorch::Reads = FakeTorch::Prepared = FakeTorch::Released = 0;
    FakeTorch::GlobalOk = true;
    setTorchHooks(&FakeTorch::Table);
  }
  void TearDown() override { setTorchHooks(nullptr); }
};

TEST_F(TorchHooksTest, TensorMatchReadsLocalStateOncePerCheck) {
  SetBuilder SB;
  TensorSpec Spec;
  Spec.PyType = SB.object(reinterpret_cast<PyObject *>(&PyLong_Type), false);
  Spec.DispatchKeys = 0x12; // (0x3 | 0x10) & ~0x1
  uint32_t TS = SB.set().addTensorSpec(Spec);
  for (const char *Name : {"a", "b"}) {
    Guard &G = SB.guard(GuardKind::TensorMatch, {SB.local(Name)});
    G.Tensor = TS;
  }
  {
    auto B = SB.bind();
    ASSERT_TRUE(B);
    EXPECT_TRUE(B->needsLocalState());
    EXPECT_EQ(FakeTorch::Prepared, 2);
    EXPECT_TRUE(check(*B, locals("{'a': 3, 'b': 2}")));
    EXPECT_EQ(FakeTorch::Reads, 1);
    EXPECT_FALSE(check(*B, locals("{'a': 3, 'b': 4}")));
    EXPECT_EQ(FakeTorch::Reads, 2);
    FakeTorch::Current.Excluded = 0;
    EXPECT_FALSE(check(*B, locals("{'a': 3, 'b': 2}")));
    FakeTorch::Current.Excluded = 0x1;
  }
  EXPECT_EQ(FakeTorch::Released, 2);
}

TEST_F(TorchHooksTest, RootTorchGuardsForward) {
  SetBuilder SB;
  Guard &G = SB.guard(GuardKind::GlobalState, {});
  G.Str = "{}";
  Ref Empty(PyTuple_New(0));
  SB.guard(GuardKind::TorchFunctionModeStack, {}, SB.object(Empty));
  auto B = SB.bind();
  EXPECT_FALSE(B->needsLocalState());
  EXPECT_TRUE(check(*B, locals("{}")));
  EXPECT_EQ(FakeTorch::Reads, 0);
  FakeTorch::GlobalOk = false;
  EXPECT_FALSE(check(*B, locals("{}")));
}

TEST_F(TorchHooksTest, FailedPrepareReleasesEarlierPayloads) {
  SetBuilder SB;
  SB.guard(GuardKind::GlobalState, {}).Str = "{}";
  SB.guard(GuardKind::GlobalState, {}).Str = "refuse";
  std::string Err = SB.bindError();
  EXPECT_NE(Err.find("refused"), std::string::npos) << Err;
  EXPECT_NE(Err.find("guard #1"), std::string::npos) << Err;
  EXPECT_EQ(FakeTorch::Prepared, 2);
  EXPECT_EQ(FakeTorch::Released, 1);
}

//===----------------------------------------------------------------------===//
// Re-entrancy
//===----------------------------------------------------------------------===//

const BoundGuardSet *InnerSet = nullptr;

PyObject *callInner(PyObject *, PyObject *Arg) {
  return PyBool_FromLong(interpret(*InnerSet, Arg));
}

TEST_F(InterpreterTest, LambdaMayReenterTheInterpreter) {
  // Inner set: L['y'] == 7 (with a new-reference read to exercise release).
  exec("class Box:\n"
       "    def __init__(self, v): self.v = v\n");
  SetBuilder Inner;
  ValueId V = Inner.attr(Inner.local("y"), "v");
  Ref Seven(PyLong_FromLong(7));
  Inner.guard(GuardKind::EqualsMatch, {V}, Inner.object(Seven));
  auto IB = Inner.bind();
  InnerSet = IB.get();
  static PyMethodDef Def = {"call_inner", callInner, METH_O, nullptr};
  Ref Fn(PyCFunction_New(&Def, nullptr));
  PyDict_SetItemString(Globals, "call_inner", Fn);
  exec("def outer_guard(x):\n"
       "    return call_inner({'y': Box(x)})\n");

  SetBuilder Outer;
  ValueId A = Outer.attr(Outer.local("o"), "v");
  ValueId X = Outer.local("x");
  // o.v (a new reference) is read before the nested call and used after it.
  Outer.guard(GuardKind::NotNone, {A});
  Outer.guard(GuardKind::Lambda, {X},
              Outer.object(global("outer_guard"), true, ObjectKind::Callable));
  Ref One(PyLong_FromLong(1));
  // The outer frame's values must survive the nested call.
  Outer.guard(GuardKind::EqualsMatch, {A}, Outer.object(One));
  auto OB = Outer.bind();
  EXPECT_TRUE(check(*OB, locals("{'x': 7, 'o': Box(1)}")));
  EXPECT_FALSE(check(*OB, locals("{'x': 8, 'o': Box(1)}")));
  EXPECT_FALSE(check(*OB, locals("{'x': 7, 'o': Box(2)}")));
  InnerSet = nullptr;
}

} // namespace

TEST_F(InterpreterTest, ExplainFailureNamesTheFirstFailingGuardOrRead) {
  SetBuilder SB;
  ValueId X = SB.local("x");
  ValueId O = SB.local("o");
  Ref Three(PyLong_FromLong(3));
  SB.guard(GuardKind::EqualsMatch, {X}, SB.object(Three));
  SB.guard(GuardKind::NoneMatch, {O});
  SB.attr(SB.local("p"), "a"); // a read with no guard of its own
  auto B = SB.bind();
  exec("p1 = Obj(); p1.a = 1\np2 = Obj()");
  // Same answer as interpret(), and no error left set.
  EXPECT_EQ(explainFailure(*B, locals("{'x': 3, 'o': None, 'p': p1}")), "");
  EXPECT_EQ(explainFailure(*B, locals("{'x': 4, 'o': 1, 'p': p1}")),
            "guard #0 (EQUALS_MATCH on L['x'])"); // the first one, in IR order
  EXPECT_EQ(explainFailure(*B, locals("{'x': 3, 'o': 1, 'p': p1}")),
            "guard #1 (NONE_MATCH on L['o'])");
  EXPECT_EQ(explainFailure(*B, locals("{'o': None, 'p': p1}")),
            "guard #0 (EQUALS_MATCH on L['x'])"); // its read fails
  EXPECT_EQ(explainFailure(*B, locals("{'x': 3, 'o': None, 'p': p2}")),
            "value #4 (getattr)");
  EXPECT_FALSE(PyErr_Occurred());
}

TEST(RuntimeHelpersTest, DescriptorReadsOfNewReferencesAreGetattrAndGetitem) {
  // gj_rt_read_run's paths hold the new references they read by testing
  // for these two kinds: the other descriptor reads must stay borrowed.
  const AccessorKind Kinds[] = {
#define GJ_ACCESSOR(Enum, Spelling, TorchName, ...) AccessorKind::Enum,
#include "guardjit/IR/Accessors.def"
  };
  for (AccessorKind K : Kinds)
    if (accessorHasReadDescriptor(K))
      EXPECT_EQ(accessorReturnsNewRef(K),
                K == AccessorKind::GetAttr || K == AccessorKind::GetItem)
          << static_cast<int>(K);
}

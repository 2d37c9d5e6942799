//===- PythonAttrTest.cpp - Native reads of known Python attribute hooks --===//
//
// knownGetAttr and the helpers built on it (gj_rt_getattr, gj_rt_no_hasattr)
// against CPython's own PyObject_GetAttr / PyObject_HasAttr on the same
// objects, for a verbatim copy of torch 2.13's nn.Module.__getattr__ and of
// transformers' PreTrainedConfig / HeterogeneousConfigMixin
// __getattribute__ (registered here without torch or transformers; the
// Python side checks the real functions' bytecode before registering them).
// Every case asserts the answer, that no error is left set, and which path
// decided it, so a fast path that silently stops applying fails the test.
//
//===----------------------------------------------------------------------===//
#include "guardjit/Runtime/PythonAttr.h"

#include "guardjit/Runtime/RuntimeHelpers.h"

#include <gtest/gtest.h>

#include <string>

using namespace guardjit;

namespace {

PyObject *NS = nullptr; // the namespace the test classes live in

void run(const char *Code) {
  PyObject *R = PyRun_String(Code, Py_file_input, NS, NS);
  if (!R) {
    PyErr_Print();
    FAIL() << "exec failed: " << Code;
  }
  Py_DECREF(R);
}

PyObject *get(const char *Name) {
  PyObject *O = PyDict_GetItemString(NS, Name);
  EXPECT_NE(O, nullptr) << Name;
  return O;
}

// Verbatim bodies (torch/nn/modules/module.py of torch 2.13,
// transformers/configuration_utils.py and
// transformers/integrations/heterogeneity/configuration_utils.py of the
// transformers the project is tested with).
const char *const Prelude = R"(
class Module:
    def __init__(self):
        object.__setattr__(self, '_parameters', {})
        object.__setattr__(self, '_buffers', {})
        object.__setattr__(self, '_modules', {})

    def __getattr__(self, name: str):
        if "_parameters" in self.__dict__:
            _parameters = self.__dict__["_parameters"]
            if name in _parameters:
                return _parameters[name]
        if "_buffers" in self.__dict__:
            _buffers = self.__dict__["_buffers"]
            if name in _buffers:
                return _buffers[name]
        if "_modules" in self.__dict__:
            modules = self.__dict__["_modules"]
            if name in modules:
                return modules[name]
        raise AttributeError(
            f"'{type(self).__name__}' object has no attribute '{name}'"
        )

class Linear(Module):
    cls_attr = 7
    def method(self):
        return 1
    @classmethod
    def cm(cls):
        return cls
    @property
    def prop(self):
        return 3
    @property
    def prop_attr_error(self):
        raise AttributeError('inside the property')
    @property
    def prop_runtime_error(self):
        raise RuntimeError('inside the property')

class OwnGetattr(Module):
    def __getattr__(self, name):
        return 'own'

class OwnGetattribute(Module):
    def __getattribute__(self, name):
        return object.__getattribute__(self, name)

class Meta(type):
    pass

class WithMeta(Module, metaclass=Meta):
    pass

class HeterogeneousConfigMixin:
    def __getattribute__(self, key: str):
        heterogeneity_spec = super().__getattribute__("__dict__").get("_heterogeneity_spec")
        if heterogeneity_spec is not None:
            if key in heterogeneity_spec:
                raise RuntimeError('per-layer attribute ' + key)
        return super().__getattribute__(key)

class PushToHubMixin:
    pass

class PreTrainedConfig(PushToHubMixin, HeterogeneousConfigMixin):
    attribute_map = {}
    output_hidden_states = False

    def __getattribute__(self, key):
        if key != "attribute_map" and key in super().__getattribute__("attribute_map"):
            key = super().__getattribute__("attribute_map")[key]
        return super().__getattribute__(key)

    @property
    def use_return_dict(self):
        return self.return_dict

    @property
    def documented(self):
        """A trivial getter with a docstring."""
        return self.n_embd

    @property
    def to_missing(self):
        return self.not_there

    @property
    def computed(self):
        return self.n_embd * 2

class SubProperty(property):
    pass

class GPT2Config(PreTrainedConfig):
    attribute_map = {'hidden_size': 'n_embd', 'odd': 5}
    def __init__(self):
        self.n_embd = 64
        self.return_dict = True
)";

class PythonAttrTest : public ::testing::Test {
protected:
  void SetUp() override {
    if (!Py_IsInitialized())
      Py_InitializeEx(0);
    if (!NS) {
      NS = PyDict_New();
      PyDict_SetItemString(NS, "__builtins__", PyEval_GetBuiltins());
      run(Prelude);
    }
    std::string Error;
    ASSERT_TRUE(
        registerModuleGetattr(classFunction("Module", "__getattr__"), &Error))
        << Error;
    ASSERT_TRUE(registerConfigGetattribute(
        classFunction("PreTrainedConfig", "__getattribute__"),
        classFunction("HeterogeneousConfigMixin", "__getattribute__"), &Error))
        << Error;
    resetKnownAttrStats();
  }
  void TearDown() override { unregisterKnownAttrFunctions(); }

  struct Ref {
    PyObject *P;
    explicit Ref(PyObject *P) : P(P) {}
    ~Ref() { Py_XDECREF(P); }
    operator PyObject *() const { return P; }
  };

  /// A borrowed function from a class __dict__ (the mappingproxy keeps the
  /// class dict, which the class keeps).
  PyObject *classFunction(const char *Cls, const char *Name) {
    PyObject *Dict = reinterpret_cast<PyTypeObject *>(get(Cls))->tp_dict;
    return PyDict_GetItemString(Dict, Name);
  }

  /// Evaluates `Expr` in the namespace; a new reference.
  PyObject *eval(const std::string &Expr) {
    PyObject *R = PyRun_String(Expr.c_str(), Py_eval_input, NS, NS);
    if (!R)
      PyErr_Print();
    return R;
  }

  enum class Path { Native, Delegated, Unknown };

  /// Reads `Obj.Name` through knownGetAttr, then through CPython, and
  /// checks they agree. Returns which path decided.
  Path expectSame(PyObject *Obj, const char *NameStr) {
    SCOPED_TRACE(NameStr);
    Ref Name(PyUnicode_InternFromString(NameStr));
    KnownAttrStats Before = knownAttrStats();
    PyObject *Known = nullptr;
    AttrOutcome O = knownGetAttr(Obj, Name, &Known);
    EXPECT_FALSE(PyErr_Occurred()) << "knownGetAttr left an error set";
    PyErr_Clear();
    KnownAttrStats After = knownAttrStats();

    PyObject *Truth = PyObject_GetAttr(Obj, Name);
    PyErr_Clear();
    int HasAttr = PyObject_HasAttr(Obj, Name);
    EXPECT_EQ(HasAttr, Truth != nullptr);

    // The helpers, which Interpreter and JIT call.
    EXPECT_EQ(gj_rt_no_hasattr(Obj, Name), HasAttr == 0);
    EXPECT_FALSE(PyErr_Occurred());
    PyObject *Helper = gj_rt_getattr(Obj, Name);
    EXPECT_FALSE(PyErr_Occurred());
    EXPECT_EQ(Helper != nullptr, Truth != nullptr);
    if (Helper && Truth)
      EXPECT_EQ(PyObject_RichCompareBool(Helper, Truth, Py_EQ), 1);
    PyErr_Clear();
    Py_XDECREF(Helper);

    if (O != AttrOutcome::Unknown) {
      EXPECT_EQ(O == AttrOutcome::Found, Truth != nullptr);
      if (Known && Truth)
        EXPECT_EQ(PyObject_RichCompareBool(Known, Truth, Py_EQ), 1)
            << "different values";
      PyErr_Clear();
    }
    Py_XDECREF(Known);
    Py_XDECREF(Truth);
    // Native: decided without running the registered function. Delegated:
    // a registered type, but CPython's path (or the real function) ran.
    // Unknown: not a registered type at all.
    bool Native = After.ModuleReads + After.ConfigReads >
                  Before.ModuleReads + Before.ConfigReads;
    bool Delegated = After.Delegated > Before.Delegated;
    EXPECT_FALSE(Native && Delegated);
    EXPECT_EQ(O == AttrOutcome::Unknown && !Delegated,
              !Native && !Delegated);
    return Native ? Path::Native : Delegated ? Path::Delegated : Path::Unknown;
  }
};

TEST_F(PythonAttrTest, ModuleAttributesFlipBothWays) {
  run("m = Linear()");
  PyObject *M = get("m");
  EXPECT_EQ(expectSame(M, "weight"), Path::Native); // absent
  run("m._parameters['weight'] = 1.5");
  EXPECT_EQ(expectSame(M, "weight"), Path::Native); // a parameter
  run("del m._parameters['weight']");
  EXPECT_EQ(expectSame(M, "weight"), Path::Native);
  run("m._buffers['running_mean'] = 'buf'");
  EXPECT_EQ(expectSame(M, "running_mean"), Path::Native);
  run("del m._buffers['running_mean']");
  EXPECT_EQ(expectSame(M, "running_mean"), Path::Native);
  run("m._modules['sub'] = Linear()");
  EXPECT_EQ(expectSame(M, "sub"), Path::Native);
  run("del m._modules['sub']");
  EXPECT_EQ(expectSame(M, "sub"), Path::Native);
  run("m.plain = 4");
  EXPECT_EQ(expectSame(M, "plain"), Path::Native); // instance dict
  run("del m.plain");
  EXPECT_EQ(expectSame(M, "plain"), Path::Native);
  // A parameter set to None is present (torch registers bias=None so).
  run("m._parameters['bias'] = None");
  EXPECT_EQ(expectSame(M, "bias"), Path::Native);
}

TEST_F(PythonAttrTest, ModuleClassAttributesAndDescriptors) {
  run("m = Linear()");
  PyObject *M = get("m");
  EXPECT_EQ(expectSame(M, "cls_attr"), Path::Native);
  EXPECT_EQ(expectSame(M, "method"), Path::Native);
  EXPECT_EQ(expectSame(M, "cm"), Path::Native);
  EXPECT_EQ(expectSame(M, "prop"), Path::Native);
  // AttributeError from a property: the hook then runs __getattr__.
  EXPECT_EQ(expectSame(M, "prop_attr_error"), Path::Native);
  run("m._modules['prop_attr_error'] = 'found by __getattr__'");
  EXPECT_EQ(expectSame(M, "prop_attr_error"), Path::Native);
  // Any other error: no __getattr__, hasattr is False.
  EXPECT_EQ(expectSame(M, "prop_runtime_error"), Path::Native);
  // A class attribute added and removed after the type was classified.
  EXPECT_EQ(expectSame(M, "late"), Path::Native);
  run("Linear.late = 1");
  EXPECT_EQ(expectSame(M, "late"), Path::Native);
  run("del Linear.late");
  EXPECT_EQ(expectSame(M, "late"), Path::Native);
}

TEST_F(PythonAttrTest, InlineValuesAndMaterializedDicts) {
  // A fresh instance whose attributes live in inline values (Module.__init__
  // uses object.__setattr__, which does not materialize the dict).
  run("fresh = Linear()");
  PyObject *F = get("fresh");
  EXPECT_EQ(expectSame(F, "_parameters"), Path::Native);
  EXPECT_EQ(expectSame(F, "missing"), Path::Native);
  run("fresh2 = Linear(); fresh2._modules['x'] = 1");
  EXPECT_EQ(expectSame(get("fresh2"), "x"), Path::Native);
}

TEST_F(PythonAttrTest, OtherTypesKeepCPythonsPath) {
  run("o1 = OwnGetattr(); o2 = OwnGetattribute(); o3 = WithMeta()");
  EXPECT_EQ(expectSame(get("o1"), "anything"), Path::Unknown);
  EXPECT_EQ(expectSame(get("o2"), "anything"), Path::Unknown);
  EXPECT_EQ(expectSame(get("o3"), "anything"), Path::Unknown);
  run("class Plain: pass\np = Plain()");
  EXPECT_EQ(expectSame(get("p"), "anything"), Path::Unknown);
  Ref Int(PyLong_FromLong(3));
  EXPECT_EQ(expectSame(Int, "real"), Path::Unknown);
  // A subclass that adds __getattr__ later stops being a Module-kind type.
  run("class Late(Module): pass\nlate = Late()");
  EXPECT_EQ(expectSame(get("late"), "x"), Path::Native);
  run("Late.__getattr__ = lambda self, name: 'late'");
  EXPECT_EQ(expectSame(get("late"), "x"), Path::Unknown);
}

TEST_F(PythonAttrTest, ImpureDictsAreDelegated) {
  // _parameters is not an exact dict: `name in` could run user code.
  run("import collections\n"
      "od = Linear(); od._parameters = collections.OrderedDict(w=1)\n"
      "class Key(str):\n"
      "    pass\n"
      "nk = Linear(); nk.__dict__[1] = 'int key'\n"
      "sk = Linear(); sk._modules[Key('k')] = 1\n");
  EXPECT_EQ(expectSame(get("od"), "w"), Path::Delegated);
  EXPECT_EQ(expectSame(get("od"), "v"), Path::Delegated);
  // A non-str key in the instance dict: nothing is decided natively.
  EXPECT_EQ(expectSame(get("nk"), "x"), Path::Delegated);
  // A str subclass key in _modules: the dict is not str-only.
  EXPECT_EQ(expectSame(get("sk"), "k"), Path::Delegated);
}

TEST_F(PythonAttrTest, ShadowedBuiltinsRunTheRealFunction) {
  // The raise path is emulated only while `type` and `AttributeError` are
  // the builtins for the function.
  run("m = Linear()");
  EXPECT_EQ(expectSame(get("m"), "nothing"), Path::Native);
  run("AttributeError = KeyError");
  EXPECT_EQ(expectSame(get("m"), "nothing"), Path::Delegated);
  run("del AttributeError");
  EXPECT_EQ(expectSame(get("m"), "nothing"), Path::Native);
}

TEST_F(PythonAttrTest, ChangedCodeRunsTheRealFunction) {
  run("m = Linear()\n"
      "saved = Module.__getattr__.__code__\n"
      "Module.__getattr__.__code__ = (lambda self, name: 'patched').__code__\n");
  EXPECT_EQ(expectSame(get("m"), "nothing"), Path::Delegated);
  run("Module.__getattr__.__code__ = saved");
  EXPECT_EQ(expectSame(get("m"), "nothing"), Path::Native);
}

TEST_F(PythonAttrTest, ClassAssignmentIsSeen) {
  run("m = Linear(); m._modules['sub'] = 1");
  EXPECT_EQ(expectSame(get("m"), "sub"), Path::Native);
  run("m.__class__ = OwnGetattr");
  EXPECT_EQ(expectSame(get("m"), "sub"), Path::Unknown);
}

TEST_F(PythonAttrTest, ConfigReads) {
  run("c = GPT2Config()");
  PyObject *C = get("c");
  EXPECT_EQ(expectSame(C, "n_embd"), Path::Native);
  EXPECT_EQ(expectSame(C, "hidden_size"), Path::Native); // via attribute_map
  EXPECT_EQ(expectSame(C, "attribute_map"), Path::Native);
  EXPECT_EQ(expectSame(C, "output_hidden_states"), Path::Native); // class
  EXPECT_EQ(expectSame(C, "vision_feature_layer"), Path::Native); // absent
  EXPECT_EQ(expectSame(C, "use_return_dict"), Path::Native); // a property
  // A mapped name that is not a str: CPython decides.
  EXPECT_EQ(expectSame(C, "odd"), Path::Delegated);
  // Flips: an attribute added and deleted; a mapping added.
  run("c.vision_feature_layer = -1");
  EXPECT_EQ(expectSame(C, "vision_feature_layer"), Path::Native);
  run("del c.vision_feature_layer");
  EXPECT_EQ(expectSame(C, "vision_feature_layer"), Path::Native);
  run("GPT2Config.attribute_map = {'width': 'n_embd'}");
  EXPECT_EQ(expectSame(C, "width"), Path::Native);
  EXPECT_EQ(expectSame(C, "hidden_size"), Path::Native);
  run("GPT2Config.attribute_map = {'hidden_size': 'n_embd', 'odd': 5}");
}

TEST_F(PythonAttrTest, TrivialPropertyGettersAreReadNatively) {
  run("c = GPT2Config()");
  PyObject *C = get("c");
  // `return self.x` getters: the property is read as getattr(self, x).
  // Reads one knownGetAttr decides natively: 2 for a trivial property (the
  // property, then its target), 1 when the getter runs as Python.
  auto NativeReads = [&](const char *NameStr) {
    Ref Name(PyUnicode_InternFromString(NameStr));
    uint64_t Before = knownAttrStats().ConfigReads;
    PyObject *V = nullptr;
    EXPECT_NE(knownGetAttr(C, Name, &V), AttrOutcome::Unknown);
    Py_XDECREF(V);
    return knownAttrStats().ConfigReads - Before;
  };
  for (const char *Name : {"use_return_dict", "documented", "to_missing"}) {
    EXPECT_EQ(expectSame(C, Name), Path::Native);
    EXPECT_EQ(NativeReads(Name), 2u) << Name;
  }
  // Any other getter runs as Python, at the same point as CPython runs it.
  EXPECT_EQ(expectSame(C, "computed"), Path::Native);
  EXPECT_EQ(NativeReads("computed"), 1u);
  // A getter whose code is replaced later is seen on the next read.
  run("saved = GPT2Config.use_return_dict.fget.__code__\n"
      "GPT2Config.use_return_dict.fget.__code__ = "
      "(lambda self: self.n_embd + 1).__code__\n");
  EXPECT_EQ(expectSame(C, "use_return_dict"), Path::Native);
  Ref Name(PyUnicode_InternFromString("use_return_dict"));
  PyObject *V = nullptr;
  ASSERT_EQ(knownGetAttr(C, Name, &V), AttrOutcome::Found);
  EXPECT_EQ(PyLong_AsLong(V), 65);
  Py_XDECREF(V);
  run("GPT2Config.use_return_dict.fget.__code__ = saved");
  // A property subclass may override __get__: not taken as a property.
  run("GPT2Config.sub = SubProperty(lambda self: self.n_embd)");
  EXPECT_EQ(expectSame(C, "sub"), Path::Native);
  EXPECT_EQ(NativeReads("sub"), 1u);
  run("del GPT2Config.sub");
}

TEST_F(PythonAttrTest, HeterogeneousConfigsAreDelegated) {
  run("h = GPT2Config(); h.__dict__['_heterogeneity_spec'] = {'n_embd'}");
  EXPECT_EQ(expectSame(get("h"), "n_embd"), Path::Delegated);
  EXPECT_EQ(expectSame(get("h"), "return_dict"), Path::Delegated);
  run("h.__dict__['_heterogeneity_spec'] = None");
  EXPECT_EQ(expectSame(get("h"), "n_embd"), Path::Native);
}

TEST_F(PythonAttrTest, ConfigMroChangesAreSeen) {
  // A mixin between the two that defines __getattribute__ changes what
  // super() finds: not the registered chain.
  run("class Intercept(HeterogeneousConfigMixin):\n"
      "    def __getattribute__(self, key):\n"
      "        return 'intercepted'\n"
      "class Odd(PreTrainedConfig, Intercept):\n"
      "    pass\n"
      "odd = Odd()\n");
  EXPECT_EQ(expectSame(get("odd"), "x"), Path::Unknown);
  // Rebinding the __class__ cell of the registered function.
  run("c2 = GPT2Config()\n"
      "cell = PreTrainedConfig.__dict__['__getattribute__'].__closure__[0]\n"
      "cell.cell_contents = GPT2Config\n");
  EXPECT_EQ(expectSame(get("c2"), "n_embd"), Path::Delegated);
  run("cell.cell_contents = PreTrainedConfig");
  EXPECT_EQ(expectSame(get("c2"), "n_embd"), Path::Native);
}

TEST_F(PythonAttrTest, NothingRegisteredMeansUnknown) {
  unregisterKnownAttrFunctions();
  run("m = Linear()");
  EXPECT_EQ(expectSame(get("m"), "x"), Path::Unknown);
}

} // namespace

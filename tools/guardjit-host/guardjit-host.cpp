//===- guardjit-host.cpp - An example serving host (guardjit.h) -----------===//
//
// Embeds CPython, builds a small real model in Python, compiles it with
// guardjit, takes the guard sets the plugin recorded (guardjit.embedding),
// then serves a loop of requests: each is checked natively through
// guardjit.h and, on a hit, dispatched straight to the compiled code (the
// cache entry's transformed bytecode, which calls the compiled graph), so
// Dynamo's frame hook never runs and no guard is checked twice. A miss (a
// request of another batch size) is served by the eager model. Reports hits,
// misses and ns per check; also checks the same inputs through the portable
// path (portable.h, DLTensor descriptions) and the Python path (guardjit.h
// over the same keep_portable_guards_unsafe set) and requires they agree.
//
// Exit status: 0 on success, 1 on a failure, 77 (ctest's skip) when the
// guardjit Python package is not importable.
//
//===----------------------------------------------------------------------===//
#include "guardjit/guardjit.h"
#include "guardjit/portable.h"

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

using namespace guardjit;
using Clock = std::chrono::steady_clock;

namespace {

// The Python half of the host: the model, and descriptions of inputs for
// the portable path. Runs in __main__.
const char *PythonSide = R"PY(
import torch
import guardjit.embedding as gje

torch.manual_seed(0)
torch.set_grad_enabled(False)   # a serving process

class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(16, 32)
        self.fc2 = torch.nn.Linear(32, 8)
    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))

model = MLP().eval()

def step(model, x):
    return model(x)

x_hit = torch.randn(4, 16)
x_miss = torch.randn(3, 16)      # another batch size: a guard fails
units = gje.compile_for_host(step, model, x_hit)

def describe(source, f_locals):
    """(shape, strides, code, bits, device_type, device_id, data_ptr,
    storage_offset, requires_grad, dispatch_keys, python_type) of the tensor
    at a Dynamo source, or ('scalar', value)."""
    v = eval(source, {"L": f_locals, "G": step.__globals__})
    if not isinstance(v, torch.Tensor):
        return ("scalar", v)
    codes = {torch.float32: (2, 32), torch.float64: (2, 64), torch.float16: (2, 16),
             torch.bfloat16: (4, 16), torch.int64: (0, 64), torch.int32: (0, 32)}
    code, bits = codes[v.dtype]
    dev = (1, 0) if v.device.type == "cpu" else (2, v.device.index or 0)
    keys = ((torch._C._dispatch_keys(v).raw_repr()
             | torch._C._dispatch_tls_local_include_set().raw_repr())
            & ~torch._C._dispatch_tls_local_exclude_set().raw_repr())
    t = type(v)
    return (list(v.shape), list(v.stride()), code, bits, dev[0], dev[1], v.data_ptr(),
            v.storage_offset(), v.requires_grad, keys, f"{t.__module__}.{t.__qualname__}")

def global_state_json():
    return torch._C._dynamo.guards.GlobalStateGuard().__getstate__()

# The same model with symbolic shapes: SHAPE_ENV guards on the batch size.
def step_dynamic(model, x):
    return model(x)

(dynamic_unit,) = gje.compile_for_host(step_dynamic, model, x_hit, dynamic=True)
dynamic_cases = [
    ("dyn batch 4", {"model": model, "x": torch.randn(4, 16)}),
    ("dyn batch 7", {"model": model, "x": torch.randn(7, 16)}),
    ("dyn batch 1", {"model": model, "x": torch.randn(1, 16)}),
    ("dyn float64", {"model": model, "x": torch.randn(5, 16, dtype=torch.float64)}),
    ("dyn 3-d", {"model": model, "x": torch.randn(2, 4, 16)}),
]

# Inputs for the agreement check: (name, f_locals), hits and misses.
agreement_cases = [
    ("same shape", {"model": model, "x": torch.randn(4, 16)}),
    ("batch 3", {"model": model, "x": x_miss}),
    ("float64", {"model": model, "x": torch.randn(4, 16, dtype=torch.float64)}),
    ("transposed", {"model": model, "x": torch.randn(16, 4).t()}),
    ("requires_grad", {"model": model, "x": torch.randn(4, 16).requires_grad_()}),
    ("16 features short", {"model": model, "x": torch.randn(4, 8)}),
]
)PY";

PyObject *Main = nullptr; // __main__'s dict (borrowed)

PyObject *mainGet(const char *Name) {
  PyObject *O = PyDict_GetItemString(Main, Name);
  if (!O) {
    std::fprintf(stderr, "guardjit-host: no '%s' in __main__\n", Name);
    std::exit(1);
  }
  return O;
}

[[noreturn]] void die(const std::string &Msg) {
  if (PyErr_Occurred())
    PyErr_Print();
  std::fprintf(stderr, "guardjit-host: error: %s\n", Msg.c_str());
  std::exit(1);
}

void require(const embed::Status &S, const char *What) {
  if (!S.ok())
    die(std::string(What) + ": " + S.message());
}

/// {'model': model, 'x': X}: the callee's frame locals.
PyObject *frameLocals(PyObject *X) {
  PyObject *D = PyDict_New();
  PyDict_SetItemString(D, "model", mainGet("model"));
  PyDict_SetItemString(D, "x", X);
  return D;
}

/// A DLTensor built from describe()'s tuple (owns its shape and strides).
struct Described {
  std::vector<int64_t> Shape, Strides;
  DLTensor T{};
  portable::TensorExt Ext;
  std::string Type;
  double Scalar = 0;
  bool IsScalar = false;
};

void describe(const std::string &Source, PyObject *Locals, Described &D) {
  PyObject *R = PyObject_CallFunction(mainGet("describe"), "sO", Source.c_str(),
                                      Locals);
  if (!R)
    die("describe(" + Source + ")");
  if (PyTuple_GET_SIZE(R) == 2) {
    D.IsScalar = true;
    D.Scalar = PyFloat_AsDouble(PyTuple_GET_ITEM(R, 1));
    Py_DECREF(R);
    return;
  }
  auto ints = [](PyObject *L, std::vector<int64_t> &Out) {
    for (Py_ssize_t K = 0; K < PyList_GET_SIZE(L); ++K)
      Out.push_back(PyLong_AsLongLong(PyList_GET_ITEM(L, K)));
  };
  ints(PyTuple_GET_ITEM(R, 0), D.Shape);
  ints(PyTuple_GET_ITEM(R, 1), D.Strides);
  D.T.ndim = static_cast<int32_t>(D.Shape.size());
  D.T.shape = D.Shape.data();
  D.T.strides = D.Strides.data();
  D.T.dtype = {static_cast<uint8_t>(PyLong_AsLong(PyTuple_GET_ITEM(R, 2))),
               static_cast<uint8_t>(PyLong_AsLong(PyTuple_GET_ITEM(R, 3))), 1};
  D.T.device = {static_cast<DLDeviceType>(PyLong_AsLong(PyTuple_GET_ITEM(R, 4))),
                static_cast<int32_t>(PyLong_AsLong(PyTuple_GET_ITEM(R, 5)))};
  D.T.data = PyLong_AsVoidPtr(PyTuple_GET_ITEM(R, 6));
  D.Ext.StorageOffset = PyLong_AsLongLong(PyTuple_GET_ITEM(R, 7));
  D.Ext.RequiresGrad = PyObject_IsTrue(PyTuple_GET_ITEM(R, 8));
  D.Ext.DispatchKeys = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(R, 9));
  D.Type = PyUnicode_AsUTF8(PyTuple_GET_ITEM(R, 10));
  D.Ext.PythonType = D.Type.c_str();
  Py_DECREF(R);
}

/// ns per check of `N` checks of `Set` on `Locals` (all answers `Expect`).
double nsPerCheck(embed::LoadedSet &Set, PyObject *Locals, int N, bool Expect) {
  bool Pass = false;
  auto Start = Clock::now();
  for (int K = 0; K < N; ++K)
    if (!Set.check(Locals, &Pass).ok() || Pass != Expect)
      die("check gave an unexpected answer in the timing loop");
  return std::chrono::duration<double, std::nano>(Clock::now() - Start).count() /
         N;
}

/// ns per whole request on `X` (frame locals built, checked when `Check`,
/// dispatched to the compiled code), median of `Rounds` rounds of `N`.
double nsPerRequest(embed::LoadedSet &Set, PyObject *Dispatch, PyObject *Model,
                    PyObject *X, int N, int Rounds, bool Check) {
  std::vector<double> Per;
  for (int R = 0; R < Rounds; ++R) {
    auto Start = Clock::now();
    for (int K = 0; K < N; ++K) {
      PyObject *L = frameLocals(X);
      bool Pass = true;
      if (Check && (!Set.check(L, &Pass).ok() || !Pass))
        die("check gave an unexpected answer in the request loop");
      PyObject *Args[] = {Model, X};
      PyObject *Out = PyObject_Vectorcall(Dispatch, Args, 2, nullptr);
      if (!Out)
        die("dispatch failed in the request loop");
      Py_DECREF(Out);
      Py_DECREF(L);
    }
    Per.push_back(
        std::chrono::duration<double, std::nano>(Clock::now() - Start).count() / N);
  }
  std::sort(Per.begin(), Per.end());
  return Per[Per.size() / 2];
}

/// Checks each (name, f_locals) of `Cases` through the portable path
/// (DLTensor descriptions) and through guardjit.h over the same
/// keep_portable_guards_unsafe set; returns the number of disagreements.
int agree(embed::Runtime &RT, PyObject *Unit, PyObject *Cases) {
  PyObject *GirObj = PyObject_GetAttrString(Unit, "gir");
  PyObject *Objects = PyObject_GetAttrString(Unit, "objects");
  if (!GirObj || !Objects)
    die("unit fields");
  std::string Gir = PyUnicode_AsUTF8(GirObj);
  std::vector<std::unique_ptr<portable::PortableSet>> PSets;
  std::string Error;
  if (!portable::PortableSet::load(Gir, "unit.gir", &PSets, &Error))
    die("portable load: " + Error);
  portable::PortableSet &P = *PSets.at(0);
  embed::LoadOptions FO;
  FO.BufferName = "unit.gir";
  FO.Passes = "keep_portable_guards_unsafe";
  std::vector<std::unique_ptr<embed::LoadedSet>> Filtered;
  require(RT.load(Gir, FO, &Filtered), "load (filtered)");
  require(Filtered[0]->bind([&](const embed::ObjectInfo &O) -> void * {
            return PyList_GetItem(Objects, O.Index);
          }),
          "bind (filtered)");
  require(Filtered[0]->compile(), "compile (filtered)");
  PyObject *Json = PyObject_CallNoArgs(mainGet("global_state_json"));
  portable::GlobalStateRecord Global;
  if (!Json || !portable::GlobalStateRecord::parse(PyUnicode_AsUTF8(Json),
                                                   &Global, &Error))
    die("global state: " + Error);
  Py_DECREF(Json);
  int Disagree = 0;
  for (Py_ssize_t C = 0; C < PyList_GET_SIZE(Cases); ++C) {
    PyObject *Case = PyList_GET_ITEM(Cases, C);
    const char *Name = PyUnicode_AsUTF8(PyTuple_GET_ITEM(Case, 0));
    PyObject *L = PyTuple_GET_ITEM(Case, 1);
    bool PyPass = false, PortPass = false;
    require(Filtered[0]->check(L, &PyPass), "check (filtered)");
    std::vector<Described> Ds(P.inputs().size());
    std::vector<portable::Input> In(P.inputs().size());
    for (size_t K = 0; K < In.size(); ++K) {
      describe(P.inputs()[K].Source, L, Ds[K]);
      if (Ds[K].IsScalar) {
        In[K].Float = Ds[K].Scalar;
        In[K].Int = static_cast<int64_t>(Ds[K].Scalar);
      } else {
        In[K].Tensor = &Ds[K].T;
        In[K].Ext = &Ds[K].Ext;
      }
    }
    std::string Why;
    if (!P.check(In.data(), In.size(), &Global, &PortPass, &Error, &Why))
      die("portable check: " + Error);
    Disagree += PyPass != PortPass;
    std::printf("guardjit-host: agreement %-18s python path %-4s portable %-4s%s%s\n",
                Name, PyPass ? "hit" : "miss", PortPass ? "hit" : "miss",
                Why.empty() ? "" : ": ", Why.c_str());
  }
  std::printf("guardjit-host: portable set %s: %zu guards, %zu inputs\n",
              P.name().c_str(), P.numGuards(), P.inputs().size());
  Py_DECREF(GirObj);
  Py_DECREF(Objects);
  return Disagree;
}

} // namespace

int main(int Argc, char **Argv) {
  int Requests = Argc > 1 ? std::atoi(Argv[1]) : 20000;

  // 1. CPython as the configured interpreter (its venv and site-packages).
  PyConfig Config;
  PyConfig_InitPythonConfig(&Config);
  PyConfig_SetBytesString(&Config, &Config.program_name, GUARDJIT_HOST_PYTHON);
  PyStatus PS = Py_InitializeFromConfig(&Config);
  PyConfig_Clear(&Config);
  if (PyStatus_Exception(PS))
    die("cannot initialize CPython");
  Main = PyModule_GetDict(PyImport_AddModule("__main__"));
  if (PyObject *M = PyImport_ImportModule("guardjit.embedding")) {
    Py_DECREF(M);
  } else {
    PyErr_Print();
    std::printf("SKIP: the guardjit Python package (guardjit.embedding) is not "
                "importable by %s\n", GUARDJIT_HOST_PYTHON);
    return 77;
  }

  // 2. The model, compiled once by guardjit in Python.
  if (!PyRun_String(PythonSide, Py_file_input, Main, Main))
    die("the Python side failed");
  PyObject *Units = mainGet("units");
  if (PyList_GET_SIZE(Units) != 1)
    die("expected one compile unit, got " + std::to_string(PyList_GET_SIZE(Units)));
  PyObject *Unit = PyList_GET_ITEM(Units, 0);
  PyObject *GirObj = PyObject_GetAttrString(Unit, "gir");
  PyObject *Objects = PyObject_GetAttrString(Unit, "objects");
  PyObject *Dispatch = PyObject_GetAttrString(Unit, "dispatch");
  if (!GirObj || !Objects || !Dispatch)
    die("unit fields");
  std::string Gir = PyUnicode_AsUTF8(GirObj);

  // 3. Load, bind (by callback: the unit's objects), compile.
  embed::RuntimeOptions RO;
  RO.EnableTorch = true;
  std::unique_ptr<embed::Runtime> RT;
  require(embed::Runtime::create(RO, &RT), "runtime");
  std::vector<std::unique_ptr<embed::LoadedSet>> Sets;
  embed::LoadOptions LO;
  LO.BufferName = "unit.gir";
  require(RT->load(Gir, LO, &Sets), "load");
  embed::LoadedSet &Set = *Sets.at(0);
  require(Set.bind([&](const embed::ObjectInfo &O) -> void * {
            return PyList_GetItem(Objects, O.Index);
          }),
          "bind");
  require(Set.compile(), "compile");

  // The same text bound by name: the `host:` names from the host's map,
  // `py:` / `lit:` resolved by guardjit (counted, to report the scheme's
  // reach).
  std::map<std::string, void *> ByName;
  size_t HostNamed = 0;
  for (const embed::ObjectInfo &O : Set.objects())
    if (O.Name.rfind("host:", 0) == 0) {
      ByName[std::string(O.Name)] = PyList_GetItem(Objects, O.Index);
      ++HostNamed;
    }
  std::vector<std::unique_ptr<embed::LoadedSet>> Named;
  require(RT->load(Gir, LO, &Named), "load (by name)");
  require(Named[0]->bindByName(ByName), "bind by name");

  // 4. Serve: check natively, dispatch straight to the compiled code.
  PyObject *XHit = mainGet("x_hit"), *XMiss = mainGet("x_miss");
  PyObject *Model = mainGet("model");
  uint64_t Hits = 0, Misses = 0;
  double CheckNs = 0;
  for (int K = 0; K < Requests; ++K) {
    PyObject *X = K % 10 == 9 ? XMiss : XHit; // every tenth request misses
    PyObject *L = frameLocals(X);
    bool Pass = false;
    auto T0 = Clock::now();
    require(Set.check(L, &Pass), "check");
    CheckNs += std::chrono::duration<double, std::nano>(Clock::now() - T0).count();
    bool NamedPass = !Pass;
    require(Named[0]->check(L, &NamedPass), "check (by name)");
    if (NamedPass != Pass)
      die("the set bound by name disagrees with the set bound by callback");
    PyObject *Out;
    if (Pass) {
      ++Hits;
      PyObject *Args[] = {Model, X};
      Out = PyObject_Vectorcall(Dispatch, Args, 2, nullptr);
    } else {
      ++Misses;
      Out = PyObject_CallOneArg(Model, X); // eager: a real server recompiles
    }
    if (!Out)
      die("dispatch failed");
    if (K < 10) { // the compiled code computes what the model computes
      PyObject *Ref = PyObject_CallOneArg(Model, X);
      PyObject *Torch = PyImport_ImportModule("torch");
      PyObject *Same = PyObject_CallMethod(Torch, "allclose", "OO", Out, Ref);
      if (!Same || !PyObject_IsTrue(Same))
        die("dispatched output differs from the model's");
      Py_XDECREF(Same);
      Py_DECREF(Torch);
      Py_DECREF(Ref);
    }
    Py_DECREF(Out);
    Py_DECREF(L);
  }
  embed::SetStats St = Set.stats();
  if (St.Hits != Hits || St.Misses != Misses || Misses != uint64_t(Requests / 10))
    die("hit / miss counts are off");

  // Steady-state ns per check, native and interpreted, hit and miss.
  PyObject *LHit = frameLocals(XHit), *LMiss = frameLocals(XMiss);
  std::vector<std::unique_ptr<embed::LoadedSet>> Interp;
  require(RT->load(Gir, LO, &Interp), "load (interpreter)");
  require(Interp[0]->bindByName(ByName), "bind (interpreter)");
  int N = 20000;
  double NativeHit = nsPerCheck(Set, LHit, N, true);
  double NativeMiss = nsPerCheck(Set, LMiss, N, false);
  double InterpHit = nsPerCheck(*Interp[0], LHit, N, true);
  // For scale: Dynamo's own tree on the same frame locals (called from C++
  // through Python's method call, ~30 ns of that is the call).
  PyObject *Root = PyObject_GetAttrString(Unit, "dynamo_root");
  PyObject *CheckName = PyUnicode_FromString("check");
  auto DStart = Clock::now();
  for (int K = 0; K < N; ++K) {
    PyObject *R = Root ? PyObject_CallMethodOneArg(Root, CheckName, LHit) : nullptr;
    if (!R || R != Py_True)
      die("Dynamo's tree does not pass on the compile-time input");
    Py_DECREF(R);
  }
  double DynamoHit =
      std::chrono::duration<double, std::nano>(Clock::now() - DStart).count() / N;
  Py_XDECREF(CheckName);
  Py_XDECREF(Root);
  // The whole request (frame locals, native check, dispatch to the compiled
  // code) against the same request with no check: interleaved, medians.
  std::vector<double> Checked, Bare, Ratio;
  for (int R = 0; R < 9; ++R) {
    Checked.push_back(nsPerRequest(Set, Dispatch, Model, XHit, 2000, 1, true));
    Bare.push_back(nsPerRequest(Set, Dispatch, Model, XHit, 2000, 1, false));
    Ratio.push_back(Checked.back() / Bare.back());
  }
  for (std::vector<double> *V : {&Checked, &Bare, &Ratio})
    std::sort(V->begin(), V->end());
  double RequestNs = Checked[Checked.size() / 2];
  double BareNs = Bare[Bare.size() / 2];

  std::printf("guardjit-host: unit %s, %zu guards (%zu inline, %zu helper calls), "
              "compiled in %.2f ms; %zu objects, %zu bound by host: names\n",
              Set.name().c_str(), St.Guards, St.InlinedGuards, St.HelperGuards,
              St.CompileMs, St.Objects, HostNamed);
  std::printf("guardjit-host: served %d requests: %llu hits (dispatched to the "
              "compiled graph), %llu misses (eager), %.0f ns per check in the "
              "loop\n",
              Requests, (unsigned long long)Hits, (unsigned long long)Misses,
              CheckNs / Requests);
  std::printf("guardjit-host: steady state: native %.0f ns per hit, %.0f ns per "
              "miss; interpreter %.0f ns per hit; Dynamo's tree %.0f ns per hit\n",
              NativeHit, NativeMiss, InterpHit, DynamoHit);
  std::printf("guardjit-host: whole request %.0f ns (%.0f requests/s), %.0f ns "
              "with no check; ratio %.2fx (median of 9 interleaved rounds)\n",
              RequestNs, 1e9 / RequestNs, BareNs, Ratio[Ratio.size() / 2]);

  // 5. The portable path agrees with the Python path on the same inputs,
  // for the static and the symbolic-shape unit.
  int Disagree = agree(*RT, Unit, mainGet("agreement_cases"));
  Disagree += agree(*RT, mainGet("dynamic_unit"), mainGet("dynamic_cases"));
  if (Disagree)
    die(std::to_string(Disagree) + " case(s) where the paths disagree");

  // 6. Misuse is an error, never a crash.
  bool Pass;
  void *One[] = {Model};
  if (Set.checkArgs(One, 1, &Pass).code() != embed::ErrorCode::InvalidArgument)
    die("wrong arity was not an error");
  Set.evict();
  if (Set.check(LHit, &Pass).code() != embed::ErrorCode::Evicted)
    die("a check after evict was not an error");
  Py_DECREF(LHit);
  Py_DECREF(LMiss);
  std::printf("guardjit-host: ok\n");
  return 0;
}

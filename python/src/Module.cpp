//===- Module.cpp - guardjit._core pybind11 bindings ----------------------===//
//
// Thin bindings: the recorder builds Guard IR through GuardSet, binds it to
// live objects, and either interprets it or compiles it with the process-wide
// GuardJIT engine. Errors from the C++ layers become Python exceptions with
// their message.
//
//===----------------------------------------------------------------------===//
#include "BuildInfo.h"
#include "Logging.h"
#include "NativeGuard.h"
#include "TensorFields.h"

#include "guardjit/Check/LLVMProvider.h"
#include "guardjit/Check/Log.h"
#include "guardjit/Check/TierUp.h"
#include "guardjit/IR/GuardSet.h"
#include "guardjit/IR/Parser.h"
#include "guardjit/IR/Printer.h"
#include "guardjit/JIT/Engine.h"
#include "guardjit/JIT/ObjectCache.h"
#include "guardjit/Runtime/BoundGuardSet.h"
#include "guardjit/Runtime/Interpreter.h"
#include "guardjit/Runtime/ObjectFacts.h"
#include "guardjit/Transforms/DiffSet.h"
#include "guardjit/Runtime/PythonAttr.h"
#include "guardjit/Runtime/SubtreeSkip.h"
#include "guardjit/Transforms/PassPipeline.h"
#include "guardjit/TorchRuntime/TorchRuntime.h"

#include "llvm/Config/llvm-config.h"

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <cstdio>
#include <mutex>

namespace py = pybind11;
using namespace guardjit;

namespace {

ObjectKind parseObjectKind(const std::string &S) {
  static const std::pair<const char *, ObjectKind> Kinds[] = {
      {"type", ObjectKind::Type},         {"object", ObjectKind::Object},
      {"constant", ObjectKind::Constant}, {"callable", ObjectKind::Callable},
      {"dict", ObjectKind::Dict},         {"key", ObjectKind::Key},
      {"state", ObjectKind::State}};
  for (const auto &[Name, Kind] : Kinds)
    if (S == Name)
      return Kind;
  throw py::value_error("unknown object kind '" + S + "'");
}

uint32_t optId(int64_t Id) {
  return Id < 0 ? InvalidId : static_cast<uint32_t>(Id);
}

std::vector<std::optional<int64_t>> toDims(const py::list &L) {
  std::vector<std::optional<int64_t>> Dims;
  for (py::handle H : L) {
    if (H.is_none())
      Dims.push_back(std::nullopt);
    else
      Dims.push_back(py::cast<int64_t>(H));
  }
  return Dims;
}

/// What cached objects depend on about this interpreter beyond the build:
/// CPython's version and ABI tag, and torch's version when torch is loaded.
std::string hostVersions() {
  // engine() runs with the GIL held (every caller is a binding); this only
  // makes that explicit.
  py::gil_scoped_acquire Gil;
  std::string S = "python=" + std::to_string(PY_VERSION_HEX);
  try {
    py::object Soabi =
        py::module_::import("sysconfig").attr("get_config_var")("SOABI");
    if (!Soabi.is_none())
      S += " soabi=" + py::cast<std::string>(Soabi);
    py::object Torch =
        py::module_::import("sys").attr("modules").attr("get")("torch");
    if (!Torch.is_none() && py::hasattr(Torch, "__version__"))
      S += " torch=" + py::cast<std::string>(py::str(Torch.attr("__version__")));
  } catch (const py::error_already_set &) {
    S += " unknown";
  }
  return S;
}

/// The process-wide engine. Deliberately leaked: compiled checks may be
/// released during interpreter shutdown, after static destructors would run.
GuardJIT *Engines[4] = {nullptr, nullptr, nullptr, nullptr};
std::mutex EnginesLock;

GuardJIT &engine(OptLevel Level) {
  std::lock_guard<std::mutex> Guard(EnginesLock);
  GuardJIT *&E = Engines[static_cast<int>(Level)];
  if (!E) {
    JITOptions Opts;
    Opts.Level = Level;
    // The on-disk object cache (docs/object-cache.md): off unless
    // GUARDJIT_CACHE_DIR names a directory (or "1" for the user's cache).
    Opts.CacheDir = cacheDirFromEnvironment();
    if (!Opts.CacheDir.empty())
      Opts.HostVersions = hostVersions();
    auto J = GuardJIT::create(Opts);
    if (!J)
      throw std::runtime_error("guardjit: cannot create the LLVM JIT: " +
                               llvm::toString(J.takeError()));
    E = J->release();
  }
  return *E;
}

/// The engine of `Level` if it was created, else nullptr.
GuardJIT *existingEngine(OptLevel Level) {
  std::lock_guard<std::mutex> Guard(EnginesLock);
  return Engines[static_cast<int>(Level)];
}

/// The provider of `Level` over engine(Level), for lib/Check (as leaked as
/// the engine it shares).
std::shared_ptr<CodeProvider> provider(int Level) {
  static std::shared_ptr<CodeProvider> *Providers[4] = {};
  GuardJIT &E = engine(static_cast<OptLevel>(Level));
  std::lock_guard<std::mutex> Guard(EnginesLock);
  std::shared_ptr<CodeProvider> *&P = Providers[Level];
  if (!P)
    P = new std::shared_ptr<CodeProvider>(
        makeLLVMProvider(std::shared_ptr<GuardJIT>(&E, [](GuardJIT *) {})));
  return *P;
}

/// lib/Check's messages go to the spdlog logger (GUARDJIT_LOGS).
bool checkLogEnabledHere(CheckLogLevel L) {
  return logEnabled(L == CheckLogLevel::Debug ? LogLevel::Debug
                                              : LogLevel::Warning);
}
void checkLogHere(CheckLogLevel L, const std::string &Message) {
  logMessage(L == CheckLogLevel::Debug ? LogLevel::Debug : LogLevel::Warning,
             Message);
}

/// The target of a callable made by make_guard; TypeError for anything else.
std::shared_ptr<CheckTarget> targetOf(py::handle Fn) {
  std::shared_ptr<CheckTarget> T = nativeGuardTarget(Fn.ptr());
  if (!T)
    throw py::type_error("not a guardjit guard callable");
  return T;
}

OptLevel parseOptLevel(const std::string &S) {
  if (S == "O0")
    return OptLevel::O0;
  if (S == "light")
    return OptLevel::Light;
  if (S == "O1")
    return OptLevel::O1;
  if (S == "O2")
    return OptLevel::O2;
  throw py::value_error("opt level must be 'O0', 'light', 'O1' or 'O2', not '" +
                        S + "'");
}

/// What live objects prove, for passes over `Sets` (nullptr entries are
/// opaque units and skipped): the recorder's objects are alive and the GIL is
/// held, so a pass may ask their fixed types. Parsed IR (some object with no
/// address) gets no facts: there is nothing live to ask.
ObjectFacts liveObjectFacts(const std::vector<const GuardSet *> &Sets) {
  for (const GuardSet *S : Sets)
    if (S)
      for (const ObjectEntry &E : S->objects())
        if (!E.Address)
          return ObjectFacts();
  ObjectFacts F;
  F.FixedTypeOf = fixedTypeOf;
  F.None = noneAddress();
  F.True = trueAddress();
  F.False = falseAddress();
  return F;
}

} // namespace

PYBIND11_MODULE(_core, M) {
  M.doc() = "guardjit native core: Guard IR, interpreter and LLVM ORC JIT.";

  // torch must be imported first (guardjit/__init__.py does), and be the
  // torch this module was compiled against.
  guardjit::python::checkTorchMatchesBuild(M);
  installTorchRuntime();
  setCheckLogSink({checkLogEnabledHere, checkLogHere});

  py::class_<GuardSet, std::shared_ptr<GuardSet>>(M, "GuardSet",
                                                  "Guard IR of one compile unit.")
      .def(py::init<std::string>(), py::arg("name") = "unit")
      .def_property("name", &GuardSet::name, &GuardSet::setName)
      .def(
          "add_object",
          [](GuardSet &S, const std::string &Kind, py::handle Obj, bool Strong,
             const std::string &Repr) {
            // The address is a borrowed PyObject*; the caller keeps `Obj`
            // alive until the set is bound (bind() takes strong references).
            return S.addObject({parseObjectKind(Kind), Repr, Strong,
                                reinterpret_cast<uintptr_t>(Obj.ptr())});
          },
          py::arg("kind"), py::arg("obj"), py::arg("strong"), py::arg("repr"),
          "Adds an object table entry for `obj`; returns its id.")
      .def(
          "add_value",
          [](GuardSet &S, const std::string &Kind, uint32_t Parent,
             const std::string &Source, const std::string &Name, int64_t Index,
             int64_t Key, int64_t Origin) {
            auto K = parseAccessorKind(Kind);
            if (!K || *K == AccessorKind::Root)
              throw py::value_error("unknown accessor '" + Kind + "'");
            if (Parent >= S.values().size())
              throw py::value_error("undefined parent value %" +
                                    std::to_string(Parent));
            Value V;
            V.Kind = *K;
            V.Parent = Parent;
            V.Source = Source;
            V.Name = Name;
            V.Index = Index;
            V.Key = optId(Key);
            if (Origin >= static_cast<int64_t>(S.origins().size()))
              throw py::value_error("undefined origin");
            V.Origin = optId(Origin);
            return S.addValue(std::move(V));
          },
          py::arg("kind"), py::arg("parent"), py::arg("source"),
          py::arg("name") = "", py::arg("index") = -1, py::arg("key") = -1,
          py::arg("origin") = -1)
      .def(
          "add_origin",
          [](GuardSet &S, const std::string &GuardType, const std::string &Name,
             const std::vector<std::string> &Derived, bool HasValue,
             bool IsGlobal, bool ValueIsParameter, bool NNModule,
             bool BuiltinNNModule) {
            GuardOrigin O;
            O.GuardType = GuardType;
            O.Name = Name;
            O.DerivedGuardTypes = Derived;
            O.HasValue = HasValue;
            O.IsGlobal = IsGlobal;
            O.ValueIsParameter = ValueIsParameter;
            O.UnspecializedNNModule = NNModule;
            O.UnspecializedBuiltinNNModule = BuiltinNNModule;
            return S.addOrigin(std::move(O));
          },
          py::arg("guard_type"), py::arg("name"), py::arg("derived") = std::vector<std::string>{},
          py::arg("has_value") = false, py::arg("is_global") = false,
          py::arg("value_is_parameter") = false, py::arg("nn_module") = false,
          py::arg("builtin_nn_module") = false,
          "Adds the GuardFilterEntry fields of one Dynamo guard (torch/_guards.py, "
          "make_guard_filter_entry in torch/_dynamo/guards.py) and returns its id "
          "for add_guard(origin=...).")
      .def(
          "set_origin",
          [](GuardSet &S, uint32_t Id, const std::string &GuardType,
             const std::string &Name, const std::vector<std::string> &Derived,
             bool HasValue, bool IsGlobal, bool ValueIsParameter, bool NNModule,
             bool BuiltinNNModule) {
            if (Id >= S.origins().size())
              throw py::value_error("undefined origin " + std::to_string(Id));
            GuardOrigin &O = S.origins()[Id];
            O.GuardType = GuardType;
            O.Name = Name;
            O.DerivedGuardTypes = Derived;
            O.HasValue = HasValue;
            O.IsGlobal = IsGlobal;
            O.ValueIsParameter = ValueIsParameter;
            O.UnspecializedNNModule = NNModule;
            O.UnspecializedBuiltinNNModule = BuiltinNNModule;
          },
          py::arg("id"), py::arg("guard_type"), py::arg("name"),
          py::arg("derived") = std::vector<std::string>{},
          py::arg("has_value") = false, py::arg("is_global") = false,
          py::arg("value_is_parameter") = false, py::arg("nn_module") = false,
          py::arg("builtin_nn_module") = false,
          "Replaces the fields of origin `id` (the recorder settles them once "
          "the Dynamo guard's create() has returned: create() appends to "
          "Guard.guard_types, which torch's filters see as derived_guard_types).")
      .def(
          "add_tensor_spec",
          [](GuardSet &S, py::handle Tensor, int64_t PyType, uint64_t Keys,
             const py::list &Sizes, const py::list &Strides) {
            TensorFields F;
            if (!readTensorFields(Tensor.ptr(), &F))
              throw py::type_error("TENSOR_MATCH value is not a torch.Tensor");
            TensorSpec T;
            T.PyType = optId(PyType);
            T.DispatchKeys = Keys;
            T.DType = F.DType;
            T.DeviceIndex = F.DeviceIndex;
            T.RequiresGrad = F.RequiresGrad;
            T.Sizes = toDims(Sizes);
            T.Strides = toDims(Strides);
            return S.addTensorSpec(std::move(T));
          },
          py::arg("tensor"), py::arg("pytype"), py::arg("dispatch_keys"),
          py::arg("sizes"), py::arg("strides"),
          "Adds TENSOR_MATCH parameters read from the example tensor the way "
          "torch's TensorCheck constructor reads them. `dispatch_keys` is "
          "LocalState.apply(keys).raw_repr() at compile time.")
      .def(
          "add_guard",
          [](GuardSet &S, const std::string &Kind,
             const std::vector<uint32_t> &Operands, int64_t Object, int64_t Aux,
             int64_t Int, const std::vector<int64_t> &Ints,
             const std::string &Str, int64_t Tensor,
             const std::string &Source, int64_t Origin,
             const std::string &File, uint32_t Line,
             const std::string &Verbose, const std::string &Expr) {
            auto K = parseGuardKind(Kind);
            if (!K)
              throw py::value_error("unknown guard kind '" + Kind + "'");
            for (uint32_t Op : Operands)
              if (Op >= S.values().size())
                throw py::value_error("undefined operand %" +
                                      std::to_string(Op));
            if (Object >= static_cast<int64_t>(S.objects().size()) ||
                Aux >= static_cast<int64_t>(S.objects().size()))
              throw py::value_error("undefined object");
            if (Tensor >= static_cast<int64_t>(S.tensorSpecs().size()))
              throw py::value_error("undefined tensor spec");
            if (Origin >= static_cast<int64_t>(S.origins().size()))
              throw py::value_error("undefined origin");
            Guard G;
            G.Kind = *K;
            G.Operands = Operands;
            G.Object = optId(Object);
            G.Aux = optId(Aux);
            G.Int = Int;
            G.Ints = Ints;
            G.Str = Str;
            G.Tensor = optId(Tensor);
            G.Attrs.Source = Source;
            G.Origin = optId(Origin);
            G.Attrs.Loc = {File, Line};
            G.Attrs.VerboseCode = Verbose;
            if (!Expr.empty()) {
              // A shape expression in its .gir spelling, type-checked here so
              // that the caller learns of a bad translation at once.
              llvm::Expected<ShapeExpr> E = parseShapeExprString(Expr);
              if (!E)
                throw py::value_error(llvm::toString(E.takeError()));
              std::vector<ShapeType> Types;
              std::string Msg =
                  inferShapeExprTypes(*E, G.Operands.size(), Types);
              if (!Msg.empty())
                throw py::value_error("shape expression '" + Expr +
                                      "': " + Msg);
              G.Expr = std::move(*E);
            }
            S.addGuard(std::move(G));
          },
          py::arg("kind"), py::arg("operands"), py::arg("object") = -1,
          py::arg("aux") = -1, py::arg("int") = 0,
          py::arg("ints") = std::vector<int64_t>(), py::arg("str") = "",
          py::arg("tensor") = -1, py::arg("source") = "",
          py::arg("origin") = -1, py::arg("file") = "", py::arg("line") = 0,
          py::arg("verbose") = "", py::arg("expr") = "")
      .def_property_readonly("num_guards",
                             [](const GuardSet &S) { return S.guards().size(); })
      .def_property_readonly("num_values",
                             [](const GuardSet &S) { return S.values().size(); })
      .def(
          "count_by_kind",
          [](const GuardSet &S) {
            py::dict D;
            auto Counts = S.countByKind();
            // Summed: two kinds can mirror one torch guard (LENGTH_CHECK of
            // each release).
            for (size_t I = 0; I < Counts.size(); ++I)
              if (Counts[I]) {
                py::str Name(std::string(torchName(static_cast<GuardKind>(I))));
                D[Name] = py::cast<size_t>(D.attr("get")(Name, 0)) + Counts[I];
              }
            return D;
          },
          "Guards per Dynamo guard kind, e.g. {'TENSOR_MATCH': 9}.")
      .def("print", &printGuardSet, "The .gir text of the set.")
      .def(
          "copy",
          [](const GuardSet &S) { return std::make_shared<GuardSet>(S); },
          "An independent copy (same object addresses), e.g. to keep the set "
          "as recorded before run_pipeline changes it.")
      .def(
          "object_addresses",
          [](const GuardSet &S) {
            std::vector<uintptr_t> A;
            A.reserve(S.objects().size());
            for (const ObjectEntry &E : S.objects())
              A.push_back(E.Address);
            return A;
          },
          "The address (a PyObject*, never dereferenced here; 0 for parsed IR) "
          "of each object table entry, in table order. With print(), which "
          "holds every other field, it identifies a set exactly (the plugin "
          "reuses a differentiating root while its set is unchanged).");

  py::class_<BoundGuardSet, std::shared_ptr<BoundGuardSet>>(
      M, "BoundGuardSet", "A guard set bound to live objects.")
      .def(
          "interpret",
          [](const BoundGuardSet &B, py::dict FrameLocals) {
            return interpret(B, FrameLocals.ptr());
          },
          py::arg("f_locals"),
          "Runs the reference interpreter over the frame locals dict.")
      .def(
          "explain",
          [](const BoundGuardSet &B, py::dict FrameLocals) {
            return explainFailure(B, FrameLocals.ptr());
          },
          py::arg("f_locals"),
          "Where the interpreter fails on the frame locals: the first failing "
          "guard (\"guard #3 (TENSOR_MATCH on L['x'])\"), or a value whose "
          "read fails; \"\" when the set passes.");

  M.def(
      "bind",
      [](std::shared_ptr<GuardSet> S) {
        std::string Error;
        std::unique_ptr<BoundGuardSet> B = BoundGuardSet::bind(S, &Error);
        if (!B) {
          logMessage(LogLevel::Warning,
                     "guard set " + S->name() + ": cannot bind: " + Error);
          throw py::value_error("guardjit: cannot bind guard set '" + S->name() +
                                "': " + Error);
        }
        return std::shared_ptr<BoundGuardSet>(std::move(B));
      },
      py::arg("guard_set"),
      "Binds a guard set to the objects whose addresses it holds. Strong "
      "entries are kept alive by the result.");

  py::class_<CompiledCheck, std::shared_ptr<CompiledCheck>>(
      M, "CompiledCheck", "Native code of one guard set.")
      .def_property_readonly(
          "compile_ms",
          [](const CompiledCheck &C) {
            const CompileStats &S = C.stats();
            return S.CacheHit ? S.CacheMs : S.LowerMs + S.CompileMs;
          })
      .def_property_readonly(
          "stats", [](const CompiledCheck &C) {
            const CompileStats &S = C.stats();
            py::dict D;
            D["lower_ms"] = S.LowerMs;
            D["compile_ms"] = S.CompileMs;
            D["guards"] = S.NumGuards;
            D["inlined"] = S.NumInlined;
            D["helpers"] = S.NumHelpers;
            D["cache_hit"] = S.CacheHit;
            D["cache_ms"] = S.CacheMs;
            return D;
          });

  M.def(
      "compile",
      [](std::shared_ptr<BoundGuardSet> B, const std::string &Level) {
        GuardJIT &J = engine(parseOptLevel(Level));
        llvm::Expected<std::unique_ptr<CompiledCheck>> C = [&] {
          // Compilation reads only bound addresses, never Python objects.
          py::gil_scoped_release NoGil;
          return J.compile(*B);
        }();
        if (!C) {
          std::string Msg = llvm::toString(C.takeError());
          logMessage(LogLevel::Warning, "guard set " + B->set().name() +
                                            ": JIT compilation failed: " + Msg);
          throw std::runtime_error("guardjit: JIT compilation failed: " + Msg);
        }
        if (logEnabled(LogLevel::Debug)) {
          const CompileStats &St = (*C)->stats();
          char Ms[64];
          std::snprintf(Ms, sizeof(Ms), "%.2f ms lowering + %.2f ms LLVM",
                        St.LowerMs, St.CompileMs);
          logMessage(LogLevel::Debug,
                     "guard set " + B->set().name() + ": " +
                         std::to_string(St.NumGuards) + " guards compiled (" +
                         std::to_string(St.NumInlined) + " inlined, " +
                         std::to_string(St.NumHelpers) + " helper calls) in " +
                         Ms);
        }
        return std::shared_ptr<CompiledCheck>(std::move(*C));
      },
      py::arg("bound"), py::arg("opt_level") = "light",
      "Compiles a bound guard set to one native check function (milliseconds; "
      "releases the GIL while LLVM runs).");

  M.def(
      "emit_llvm",
      [](std::shared_ptr<BoundGuardSet> B, const std::string &Level) {
        auto Text = engine(parseOptLevel(Level)).emitLLVM(*B);
        if (!Text)
          throw std::runtime_error(llvm::toString(Text.takeError()));
        return *Text;
      },
      py::arg("bound"), py::arg("opt_level") = "light");

  M.def(
      "make_guard",
      [](std::shared_ptr<BoundGuardSet> B, std::shared_ptr<CompiledCheck> C,
         bool VerifyFirstCall) {
        std::shared_ptr<CheckTarget> T = makeCheckTarget(
            std::move(B), C ? wrapCompiledCheck(std::move(C)) : nullptr,
            VerifyFirstCall);
        PyObject *Fn = makeNativeGuard(std::move(T));
        if (!Fn)
          throw py::error_already_set();
        return py::reinterpret_steal<py::object>(Fn);
      },
      py::arg("bound"), py::arg("native").none(true),
      py::arg("verify_first_call") = false,
      "Returns a C-level callable `f(f_locals) -> bool` running the native "
      "check (or the interpreter when `native` is None). It keeps the bound "
      "set and the code alive. With `verify_first_call`, the first call also "
      "runs the interpreter, as for code the background tier installs: on a "
      "disagreement the interpreter's answer stands and the code is dropped "
      "for good (tier_up_stats()['distrusted']).");

  M.def(
      "enable_subtree_skip",
      [](py::handle Fn, py::dict FrameLocals) -> std::string {
        return enableSubtreeSkip(*targetOf(Fn), FrameLocals.ptr());
      },
      py::arg("check"), py::arg("f_locals"),
      "Gives the check behind `check` (a make_guard callable) sound subtree "
      "skipping (Runtime/SubtreeSkip.h), planned on `f_locals`, frame locals "
      "its full check passes on. Returns \"\" when enabled, else why not. "
      "Call before the callable is installed; GIL held. The residual check "
      "is interpreted until skip_compile's background compile lands (in "
      "native mode skipping waits for it).");

  M.def(
      "register_modulelist_getitem",
      [](py::handle GetItem, py::handle AbsIndex, py::handle Len) {
        std::string Err;
        if (!registerModuleListGetItem(GetItem.ptr(), AbsIndex.ptr(), Len.ptr(),
                                       &Err))
          throw py::type_error(Err);
      },
      "Registers torch.nn.ModuleList's __getitem__, _get_abs_string_index "
      "and __len__ (checked by pyattr.py) for subtree skipping.");

  M.def(
      "skip_compile",
      [](py::handle Fn, const std::string &Level) {
        std::shared_ptr<CheckTarget> T = targetOf(Fn);
        return compileResidual(*T, static_cast<int>(parseOptLevel(Level)),
                               provider);
      },
      py::arg("check"), py::arg("opt_level") = "O1",
      "Queues the native compile of the residual check of `check` on the "
      "background tier; False when there is none or it is already queued.");

  M.def(
      "skip_stats",
      [](py::handle Fn) -> py::object {
        std::shared_ptr<CheckTarget> T = targetOf(Fn);
        if (!T->Skip)
          return py::none();
        SkipState &K = *T->Skip;
        SkipPlan &P = *K.Plan;
        py::dict D;
        D["subtrees"] = P.numSubtrees();
        D["stable_values"] = P.numStableValues();
        D["steps"] = P.numSteps();
        D["implied_guards"] = P.numImpliedGuards();
        D["residual_guards"] = P.numResidualGuards();
        D["hits"] = P.stats().Hits;
        D["fallbacks"] = P.stats().Fallbacks;
        D["records"] = P.stats().Records;
        D["record_failures"] = P.stats().RecordFailures;
        D["disabled"] = K.Disabled;
        D["snapshot"] = P.valid();
        D["residual_native"] = K.Residual->Fn.load() != nullptr;
        return D;
      },
      py::arg("check"),
      "Counters of the subtree skipping of `check`, or None without it.");

  M.def(
      "skip_profile",
      [](py::handle Fn, py::dict FrameLocals, int Calls) -> py::object {
        std::optional<SkipProfile> Prof =
            profileSkip(*targetOf(Fn), FrameLocals.ptr(), Calls);
        if (!Prof)
          return py::none();
        py::dict D;
        D["validate_ns"] = Prof->ValidateNs;
        D["residual_ns"] = Prof->ResidualNs;
        D["validated"] = Prof->Validated;
        D["passed"] = Prof->Passed;
        return D;
      },
      py::arg("check"), py::arg("f_locals"), py::arg("calls") = 1000,
      "Benchmark aid: ns per call of the validation alone and of the "
      "residual check alone on `f_locals` (None without a snapshot). Runs "
      "no Python code; GIL held.");

  M.def(
      "residual_set",
      [](py::handle Fn) -> py::object {
        std::shared_ptr<CheckTarget> T = targetOf(Fn);
        if (!T->Skip)
          return py::none();
        return py::cast(std::const_pointer_cast<GuardSet>(
            std::shared_ptr<const GuardSet>(T->Skip->Plan->residual())));
      },
      py::arg("check"), "The residual guard set of `check`, or None.");

  M.def(
      "guard_counters",
      [](py::handle Fn) {
        std::shared_ptr<CheckTarget> T = targetOf(Fn);
        return py::make_tuple(T->Calls, T->Failures, T->Fn.load() != nullptr);
      },
      "(calls, failures, native) of a callable made by make_guard.");

  M.def(
      "guard_level",
      [](py::handle Fn) -> py::object {
        std::shared_ptr<CheckTarget> T = targetOf(Fn);
        int L = T->Level.load();
        if (L < 0)
          return py::none();
        return py::str(optLevelName(static_cast<OptLevel>(L)));
      },
      "The code level ('O0', 'light', 'O1', 'O2') of the function a callable "
      "made by make_guard runs now, or None for the interpreter.");

  M.def(
      "tier_up",
      [](py::handle Fn, const std::string &Level) {
        std::shared_ptr<CheckTarget> T = targetOf(Fn);
        return tierUp(std::move(T), static_cast<int>(parseOptLevel(Level)),
                      provider);
      },
      py::arg("check"), py::arg("opt_level") = "O1",
      "Queues a recompile of the check behind `check` (a make_guard callable) "
      "at `opt_level` on guardjit's background thread; the new function "
      "replaces the old one atomically when ready. False when nothing was "
      "queued (interpreter, already at that level, or after exit began). "
      "GIL held; returns at once.");

  M.def(
      "start_native",
      [](py::handle Fn, const std::string &Level, const std::string &Then) {
        std::shared_ptr<CheckTarget> T = targetOf(Fn);
        int L = static_cast<int>(parseOptLevel(Level));
        int Next = -1;
        if (!Then.empty() && Then != "off")
          Next = static_cast<int>(parseOptLevel(Then));
        return startNative(std::move(T), L, Next, provider);
      },
      py::arg("check"), py::arg("opt_level") = "light",
      py::arg("then") = "off",
      "Interpreter first: queues the native compile of the check behind "
      "`check` (a make_guard callable still running the interpreter) at "
      "`opt_level` on guardjit's background thread, and, once that code is "
      "in place, a recompile at `then` when it is a higher level. Each new "
      "code is swapped in atomically; its first call also runs the "
      "interpreter and must agree with it. False when nothing was queued. "
      "GIL held; returns at once.");

  M.def(
      "wait_tier_up", &waitTierUp, py::arg("timeout_s") = -1.0,
      "Waits (GIL released) until no background compile is queued or "
      "running, at most `timeout_s` seconds (negative: no limit). True when "
      "none is left.");

  M.def(
      "live_checks", [] { return CheckTarget::Live.load(); },
      "Check targets alive in this process (one per make_guard callable, "
      "plus one per residual check of subtree skipping), each holding a "
      "bound set and its native code: 0 once every unit died and the "
      "background tier drained (wait_tier_up).");

  M.def("tier_up_stats", [] {
    TierUpStats St = tierUpStats();
    py::dict D;
    D["scheduled"] = St.Scheduled;
    D["installed"] = St.Installed;
    D["failed"] = St.Failed;
    D["dropped"] = St.Dropped;
    D["pending"] = St.Pending;
    D["compile_ms"] = St.CompileMs;
    D["distrusted"] = distrustedCount();
    D["last_error"] = St.LastError;
    return D;
  }, "Counters of the background tier since the process started.");
  M.def("object_cache_stats", [] {
    // One entry per code level whose engine exists (each has its own key
    // space, one directory).
    py::dict Out;
    for (OptLevel L :
         {OptLevel::O0, OptLevel::Light, OptLevel::O1, OptLevel::O2}) {
      GuardJIT *E = existingEngine(L);
      if (!E)
        continue;
      GuardJIT::CacheInfo I = E->cacheInfo();
      py::dict D;
      D["dir"] = I.Dir;
      D["status"] = I.Status;
      D["hits"] = I.Hits;
      D["misses"] = I.Misses;
      D["rejected"] = I.Rejected;
      D["stores"] = I.Stores;
      D["store_errors"] = I.StoreErrors;
      Out[optLevelName(L)] = D;
    }
    return Out;
  }, "The on-disk object cache of each engine created so far: directory "
     "(empty when off; `status` says why when GUARDJIT_CACHE_DIR asked for "
     "one), hits, misses, rejected files, stores and store errors.");
  M.def("stop_tier_up", &stopTierUp,
        "Stops the background tier for good (run at interpreter exit).");
  // Before finalization: the worker must not outlive the interpreter's
  // runtime state, which its pending calls and the graveyard rely on.
  py::module_::import("atexit").attr("register")(M.attr("stop_tier_up"));

  M.def(
      "run_pipeline",
      [](GuardSet &S, const std::string &Text) {
        llvm::Expected<PassPipeline> P = PassPipeline::parse(Text);
        if (!P)
          throw py::value_error("guardjit: bad pass pipeline '" + Text +
                                "': " + llvm::toString(P.takeError()));
        // The recorder's objects are alive: the passes may use what they
        // prove (fold-implied). The GIL is held: the facts read types.
        PassContext Ctx;
        Ctx.Facts = liveObjectFacts({&S});
        size_t GuardsIn = S.guards().size(), ValuesIn = S.values().size();
        std::vector<PassRunStats> Runs;
        if (llvm::Error E = P->run(S, Ctx, &Runs))
          throw std::runtime_error("guardjit: " +
                                   llvm::toString(std::move(E)));
        py::list Passes;
        for (const PassRunStats &R : Runs) {
          py::dict Removed;
          for (size_t K = 0; K < R.GuardsRemoved.size(); ++K)
            if (R.GuardsRemoved[K]) {
              py::str Name(std::string(torchName(static_cast<GuardKind>(K))));
              Removed[Name] = py::cast<size_t>(Removed.attr("get")(Name, 0)) +
                              R.GuardsRemoved[K];
            }
          py::dict D;
          D["name"] = R.Pass;
          D["guards_removed"] = Removed;
          D["values_removed"] = R.ValuesRemoved;
          D["us"] = R.Micros;
          Passes.append(D);
        }
        py::dict Out;
        Out["pipeline"] = P->str();
        Out["guards_in"] = GuardsIn;
        Out["guards_out"] = S.guards().size();
        Out["values_in"] = ValuesIn;
        Out["values_out"] = S.values().size();
        Out["passes"] = Passes;
        return Out;
      },
      py::arg("guard_set"), py::arg("pipeline") = "default",
      "Runs a -passes= pipeline (e.g. 'default', "
      "'skip_guard_on_all_nn_modules_unsafe,default') over the set in place, "
      "before it is bound. Call with the recorder's objects alive (GIL held). "
      "Returns {'pipeline', 'guards_in', 'guards_out', 'values_in', "
      "'values_out', 'passes': [{'name', 'guards_removed': {TORCH_KIND: n}, "
      "'values_removed', 'us'}]}. A bad pipeline raises ValueError with the "
      "column at fault.");

  M.def(
      "registered_passes",
      [] {
        py::list Out;
        for (const RegisteredPass &P : registeredPasses()) {
          static const char *const Kinds[] = {"pass", "pass_with_params",
                                              "multiset_pass", "pipeline"};
          py::dict D;
          D["name"] = P.Name;
          D["kind"] = Kinds[static_cast<int>(P.EntryKind)];
          D["params"] = P.Params;
          D["description"] = P.Description;
          D["torch_filter"] = P.isTorchFilter();
          Out.append(D);
        }
        return Out;
      },
      "Every entry of Passes.def in its order, as guard-ir-opt "
      "--print-passes lists them: [{'name', 'kind' ('pass', "
      "'pass_with_params', 'multiset_pass', 'pipeline'), 'params' (a "
      "pipeline's expansion), 'description', 'torch_filter' (one of torch's "
      "guard_filter_fn filters, named as in torch.compiler)}].");

  M.def(
      "diffsets",
      [](const std::vector<std::shared_ptr<GuardSet>> &Sets,
         const std::string &Policy) {
        std::optional<DiffSetPolicy> P = parseDiffSetPolicy(Policy);
        if (!P)
          throw py::value_error("guardjit: unknown diffset policy '" + Policy +
                                "' (expected: torch-compatible, minimal, "
                                "guarded-minimal)");
        std::vector<const GuardSet *> Units;
        for (const std::shared_ptr<GuardSet> &S : Sets)
          Units.push_back(S.get());
        PassContext Ctx;
        Ctx.Facts = liveObjectFacts(Units);
        std::vector<DiffSetUnit> Result = DiffSetPass(*P).run(Units, Ctx);
        py::list OutSets, OutUnits;
        for (DiffSetUnit &U : Result) {
          if (U.Set)
            OutSets.append(std::make_shared<GuardSet>(std::move(*U.Set)));
          else
            OutSets.append(py::none());
          const DiffSetUnitStats &St = U.Stats;
          py::dict D;
          D["guards_in"] = St.GuardsIn;
          D["guards_out"] = St.GuardsOut;
          D["seed"] = St.Seed;
          D["by_contradiction"] = St.ByContradiction;
          D["by_difference"] = St.ByDifference;
          D["by_opaque"] = St.ByOpaque;
          D["exact"] = St.Exact;
          OutUnits.append(D);
        }
        py::dict Out;
        Out["sets"] = OutSets;
        Out["units"] = OutUnits;
        return Out;
      },
      py::arg("sets"), py::arg("policy") = "torch-compatible",
      "Differentiating sets of the compile units of one code object "
      "(docs/diffsets.md). `sets` is in cache order (front first); None is a "
      "unit whose guards guardjit does not know (then every other unit keeps "
      "all of its guards). Returns {'sets': [GuardSet | None, ...] (new "
      "reduced copies, same order, same object addresses; None stays None), "
      "'units': [{'guards_in', 'guards_out', 'seed', 'by_contradiction', "
      "'by_difference', 'by_opaque', 'exact'}, ...]}: per unit, the pairs "
      "(i, j) covered by a contradicting guard, by keeping G_i \\ G_j, or by "
      "an opaque j, and whether the set is a smallest one. The inputs are not "
      "changed. Call with the recorder's objects alive and the GIL held. An "
      "unknown policy raises ValueError.");

  M.def(
      "set_log_level",
      [](const std::string &Name) {
        if (!setLogLevel(Name))
          throw py::value_error("guardjit: unknown log level '" + Name +
                                "' (debug, info, warning, error, critical, off)");
      },
      py::arg("level"),
      "Sets the C++ (spdlog) logger's level; guardjit/_logging.py sets it "
      "with the Python logger's from GUARDJIT_LOGS.");
  M.def("log_level", &logLevel, "The C++ logger's level name.");
  M.def("set_in_mode_without_ignore_compile_internals",
        &setInModeWithoutIgnoreCompileInternals, py::arg("in_mode"),
        "Mirrors torch's thread-local of the same name for this thread.");
  M.def("apply_local_state", &applyLocalState, py::arg("keys"),
        py::arg("included"), py::arg("excluded"), py::arg("override"),
        py::arg("mask_python_keys"),
        "torch::dynamo::LocalState::apply(keys).raw_repr() for a LocalState "
        "given by its pickled fields (torch 2.14's RootGuardManager local "
        "state).");
  M.def("masks_python_keys", &masksPythonKeys,
        "Whether TENSOR_MATCH on this thread masks the Python dispatch keys.");

  M.def(
      "register_module_getattr",
      [](py::handle Fn) {
        std::string Error;
        if (!registerModuleGetattr(Fn.ptr(), &Error))
          throw py::value_error("guardjit: " + Error);
      },
      py::arg("fn"),
      "Registers torch.nn.Module.__getattr__ for native getattr/hasattr "
      "(Runtime/PythonAttr.h). The caller checked its bytecode (pyattr.py).");
  M.def(
      "register_config_getattribute",
      [](py::handle Outer, py::handle Inner) {
        std::string Error;
        if (!registerConfigGetattribute(Outer.ptr(), Inner.ptr(), &Error))
          throw py::value_error("guardjit: " + Error);
      },
      py::arg("outer"), py::arg("inner"),
      "Registers transformers' PreTrainedConfig.__getattribute__ and the "
      "__getattribute__ its super() finds (HeterogeneousConfigMixin's).");
  M.def("unregister_known_attr_functions", &unregisterKnownAttrFunctions,
        "Drops both registrations: every read runs CPython's path.");
  M.def(
      "known_attr_stats",
      [] {
        KnownAttrStats S = knownAttrStats();
        py::dict D;
        D["module_reads"] = S.ModuleReads;
        D["config_reads"] = S.ConfigReads;
        D["delegated"] = S.Delegated;
        return D;
      },
      "Attribute reads decided natively per registered function, and reads "
      "of those types handed back to CPython, since the last reset.");
  M.def("reset_known_attr_stats", &resetKnownAttrStats);

  M.attr("PY_VERSION_HEX") = PY_VERSION_HEX;
  M.attr("LLVM_VERSION") = LLVM_VERSION_STRING;
}

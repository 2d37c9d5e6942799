//===- Check.cpp - Check target, JIT and tier-up bindings -----------------===//
//
// The binding of lib/Check: the process-wide GuardJIT engines (one per code
// level, with the on-disk object cache) as CodeProviders, compile(),
// make_guard() (a check target behind a NativeGuard callable) and the calls
// that drive a target's life (subtree skipping, background tiers). The life
// itself is lib/Check's (Check/CheckTarget.h, Check/TierUp.h).
//
//===----------------------------------------------------------------------===//
#include "Bindings.h"

#include "Logging.h"
#include "NativeGuard.h"

#include "guardjit/Check/CheckTarget.h"
#include "guardjit/Check/LLVMProvider.h"
#include "guardjit/Check/Log.h"
#include "guardjit/Check/TierUp.h"
#include "guardjit/JIT/Engine.h"
#include "guardjit/JIT/ObjectCache.h"
#include "guardjit/Runtime/BoundGuardSet.h"

#include "llvm/Support/Error.h"

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdio>
#include <mutex>

namespace py = pybind11;
using namespace guardjit;

namespace {

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

} // namespace

void guardjit::python::populateCheck(py::module_ &M) {
  setCheckLogSink({checkLogEnabledHere, checkLogHere});

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
      [](py::handle Fn, py::dict FrameLocals, bool CostModel) -> std::string {
        return enableSubtreeSkip(*targetOf(Fn), FrameLocals.ptr(), CostModel);
      },
      py::arg("check"), py::arg("f_locals"), py::arg("cost_model") = true,
      "Gives the check behind `check` (a make_guard callable) sound subtree "
      "skipping (Runtime/SubtreeSkip.h), planned on `f_locals`, frame locals "
      "its full check passes on. Returns \"\" when enabled, else why not "
      "(with `cost_model`, also when the plan would not pay). "
      "Call before the callable is installed; GIL held. The residual check "
      "is interpreted until skip_compile's background compile lands (in "
      "native mode skipping waits for it).");

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
        D["prelude_guards"] = P.numPreludeGuards();
        D["full_cost"] = P.fullCost();
        D["skip_cost"] = P.skipCost();
        D["hits"] = P.stats().Hits;
        D["fallbacks"] = P.stats().Fallbacks;
        D["records"] = P.stats().Records;
        D["record_failures"] = P.stats().RecordFailures;
        D["disabled"] = K.Disabled;
        D["snapshot"] = P.valid();
        D["residual_native"] = K.Residual->Fn.load() != nullptr &&
                               (!K.Prelude || K.Prelude->Fn.load() != nullptr);
        return D;
      },
      py::arg("check"),
      "Counters of the subtree skipping of `check`, or None without it.");

  M.def(
      "skip_sets",
      [](py::handle Fn) -> py::object {
        std::shared_ptr<CheckTarget> T = targetOf(Fn);
        if (!T->Skip)
          return py::none();
        const SkipPlan &P = *T->Skip->Plan;
        return py::make_tuple(P.residual(), P.prelude());
      },
      py::arg("check"),
      "(residual, prelude) guard sets of the subtree skipping of `check` "
      "(SubtreeSkip.h: the guards still checked on a skipping call; the "
      "prelude is None without one), or None without skipping. Copies are "
      "not made: treat them as read-only.");

  M.def(
      "skip_profile",
      [](py::handle Fn, py::dict FrameLocals, int Calls) -> py::object {
        std::optional<SkipProfile> Prof =
            profileSkip(*targetOf(Fn), FrameLocals.ptr(), Calls);
        if (!Prof)
          return py::none();
        py::dict D;
        D["prelude_ns"] = Prof->PreludeNs;
        D["prelude_passed"] = Prof->PreludePassed;
        D["validate_ns"] = Prof->ValidateNs;
        D["residual_ns"] = Prof->ResidualNs;
        D["full_ns"] = Prof->FullNs;
        D["validated"] = Prof->Validated;
        D["passed"] = Prof->Passed;
        return D;
      },
      py::arg("check"), py::arg("f_locals"), py::arg("calls") = 1000,
      "Benchmark aid: ns per call of the prelude alone, the validation "
      "alone, the residual check alone and the full check on `f_locals` "
      "(None without a "
      "snapshot). Runs Python only through the prelude's guards; GIL held.");

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
      "prelude_set",
      [](py::handle Fn) -> py::object {
        std::shared_ptr<CheckTarget> T = targetOf(Fn);
        if (!T->Skip || !T->Skip->Plan->prelude())
          return py::none();
        return py::cast(std::const_pointer_cast<GuardSet>(
            std::shared_ptr<const GuardSet>(T->Skip->Plan->prelude())));
      },
      py::arg("check"),
      "The prelude guard set of `check` (its guards that may run Python, "
      "run before validation), or None.");

  M.def("set_profiler_events", &setProfilerEvents, py::arg("on"),
        "Turns the torch.profiler events of guardjit's checks (\"guardjit "
        "check\" inside \"TorchDynamo Cache Lookup\", the skip markers) "
        "on (the default) or off; returns the previous setting.");

  M.def(
      "time_guard_calls",
      [](py::handle Fn, py::handle FrameLocals, int Calls, bool Recorded) {
        std::shared_ptr<CheckTarget> T = targetOf(Fn);
        return timeGuardCalls(*T, FrameLocals.ptr(), Calls, Recorded);
      },
      py::arg("check"), py::arg("f_locals"), py::arg("calls"),
      py::arg("recorded") = true,
      "Benchmark aid: ns per call of `calls` calls of the check behind "
      "`check` on `f_locals`, as the callable makes them (`recorded`: with "
      "its torch.profiler event, or torch's test for a profiler when none "
      "runs) or without the profiler test. GIL held.");

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
}

//===- CompileBench.cpp - Compile latency per guard set and level ---------===//
//
// `compile/<set>/<level>`: GuardJIT::compile of one bound guard set (lower,
// IR passes, code generation, JITLink, lookup), its code freed after each
// iteration. The sets are every tests/corpus/*.gir file and two synthetic
// sets of 100 and 1,000 guards shaped like a real model (below). Counters,
// per compile:
//
//   guards              guards in the set
//   ms_per_100_guards   (lower + compile) ms * 100 / guards, wall time
//   cpu_ms_per_100_guards  the same in the thread's CPU time (what to
//                       compare on a shared machine)
//   lower_ms, opt_ms, codegen_ms, link_ms   the phases (CompileStats)
//   code_bytes          text section bytes of the emitted object
//   code_bytes_per_1000_guards
//   ir_insts_per_guard, ir_blocks_per_guard  LLVM IR as lowered
//
// Compilation reads only addresses, so the object table is bound to
// placeholders of a fitting kind (a type where a type is needed, the str of
// the key's text where a key is hashed, a callable for lambdas); a set's
// code is never run here.
//
// The corpus directory is GUARDJIT_CORPUS_DIR (the environment variable
// overrides the path compiled in).
//
//===----------------------------------------------------------------------===//
#include "BenchSupport.h"

#include "guardjit/IR/Parser.h"

#include "benchmark/benchmark.h"
#include "llvm/IR/PassTimingInfo.h"
#include "llvm/Pass.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>

#include <time.h>

#ifndef GUARDJIT_CORPUS_DIR
#define GUARDJIT_CORPUS_DIR "tests/corpus/torch-2.13.0"
#endif

namespace guardjit::bench {

namespace {

[[noreturn]] void fail(const std::string &Msg) {
  if (PyErr_Occurred())
    PyErr_Print();
  std::fprintf(stderr, "guardjit-microbench (compile): %s\n", Msg.c_str());
  std::exit(1);
}

/// A placeholder for object table entry `E` (new reference), from its kind
/// and repr: literals evaluate to themselves (keys keep their text),
/// `<class 'a.b.C'>` resolves when importable, else a fresh class.
PyObject *placeholder(const ObjectEntry &E) {
  static PyObject *Fn = [] {
    exec("import ast, importlib, re\n"
         "def _gj_placeholder(kind, text):\n"
         "    if kind in ('key', 'constant'):\n"
         "        try:\n"
         "            return ast.literal_eval(text)\n"
         "        except Exception:\n"
         "            return text if kind == 'key' else object()\n"
         "    if kind == 'type':\n"
         "        m = re.fullmatch(r\"<class '([\\w.]+)'>\", text)\n"
         "        if m:\n"
         "            mod, _, name = m.group(1).rpartition('.')\n"
         "            try:\n"
         "                t = getattr(importlib.import_module(mod or "
         "'builtins'), name)\n"
         "                if isinstance(t, type):\n"
         "                    return t\n"
         "            except Exception:\n"
         "                pass\n"
         "        return type('Placeholder', (), {})\n"
         "    if kind == 'dict':\n"
         "        return {}\n"
         "    if kind == 'callable':\n"
         "        return lambda *a, **k: True\n"
         "    return object()\n");
    return eval("_gj_placeholder");
  }();
  PyObject *R = PyObject_CallFunction(Fn, "s#s#", spelling(E.Kind).data(),
                                      (Py_ssize_t)spelling(E.Kind).size(),
                                      E.Repr.data(), (Py_ssize_t)E.Repr.size());
  if (!R)
    fail("placeholder for " + E.Repr);
  return R;
}

/// Objects the placeholder sets point at; alive for the process.
std::vector<PyObject *> &keptAlive() {
  static std::vector<PyObject *> K;
  return K;
}

void setObject(GuardSet &S, ObjectId Id, PyObject *O) {
  keptAlive().push_back(O); // owned
  S.objects()[Id].Address = reinterpret_cast<uintptr_t>(O);
}

/// Binds every object of `S` to a placeholder, then replaces those whose
/// users need another kind of object than the repr gave.
void bindPlaceholders(GuardSet &S) {
  for (ObjectId I = 0; I < S.objects().size(); ++I)
    setObject(S, I, placeholder(S.objects()[I]));
  auto Obj = [&](ObjectId Id) {
    return reinterpret_cast<PyObject *>(S.objects()[Id].Address);
  };
  auto NeedType = [&](ObjectId Id) {
    if (Id < S.objects().size() && !PyType_Check(Obj(Id)))
      setObject(S, Id, eval("type('Placeholder', (), {})"));
  };
  auto NeedStr = [&](ObjectId Id) {
    if (Id < S.objects().size() && !PyUnicode_Check(Obj(Id)))
      setObject(S, Id, PyUnicode_FromString(S.objects()[Id].Repr.c_str()));
  };
  auto NeedCallable = [&](ObjectId Id) {
    if (Id < S.objects().size() && !PyCallable_Check(Obj(Id)))
      setObject(S, Id, eval("lambda *a, **k: True"));
  };
  auto Need = [&](ObjectId Id, int (*Ok)(PyObject *), const char *Expr) {
    if (Id < S.objects().size() && !Ok(Obj(Id)))
      setObject(S, Id, eval(Expr));
  };
  for (const Value &V : S.values()) {
    if (V.Kind == AccessorKind::GetAttr ||
        V.Kind == AccessorKind::GenericGetAttr)
      NeedStr(V.Key);
    else if (V.Kind == AccessorKind::Globals)
      Need(V.Key, [](PyObject *O) { return PyDict_Check(O); }, "{}");
    else if (V.Kind == AccessorKind::Lambda)
      NeedCallable(V.Key);
  }
  static PyObject *TensorType = eval("torch.Tensor");
  for (const Guard &G : S.guards()) {
    switch (G.Kind) {
    case GuardKind::TypeMatch:
    case GuardKind::SavedTensorsHooks:
    case GuardKind::DispatchKeySetMatch:
      NeedType(G.Object);
      break;
    case GuardKind::FakeScriptTypeMatch:
      NeedType(G.Aux);
      break;
    case GuardKind::NoHasAttr:
      NeedStr(G.Object);
      break;
    case GuardKind::Lambda:
    case GuardKind::EpilogueLambda:
      NeedCallable(G.Object);
      break;
    case GuardKind::ShapeExpr:
      if (G.Object != InvalidId)
        NeedCallable(G.Object);
      break;
    case GuardKind::DefaultDevice:
      Need(G.Aux, [](PyObject *O) { return PyDict_Check(O); }, "{}");
      break;
    case GuardKind::TupleIteratorLen:
      setObject(S, G.Object, eval("type(iter(()))"));
      break;
    case GuardKind::RangeIteratorMatch:
      setObject(S, G.Object, eval("type(iter(range(0)))"));
      break;
    case GuardKind::TorchFunctionModeStack:
      Need(G.Object, [](PyObject *O) { return PyTuple_Check(O); }, "()");
      break;
    case GuardKind::DimensionMarking:
      if (!PyTuple_Check(Obj(G.Object)) || PyTuple_GET_SIZE(Obj(G.Object)) != 3)
        setObject(S, G.Object, eval("({}, [], {})"));
      break;
    case GuardKind::TensorMatch: {
      ObjectId T = S.tensorSpec(G.Tensor).PyType;
      if (!PyType_Check(Obj(T)) ||
          !PyType_IsSubtype(reinterpret_cast<PyTypeObject *>(Obj(T)),
                            reinterpret_cast<PyTypeObject *>(TensorType)))
        setObject(S, T, Py_NewRef(TensorType));
      break;
    }
    default:
      break;
    }
  }
}

/// `Base` grown or cut to `N` guards with its kind mix and value paths.
/// Grown (N >= T, T = Base's guards): guard k is guard k % T of copy k / T,
/// each copy reading its own values (the paths of its guards' operands are
/// cloned: the per-layer structure repeated). Cut (N < T): the first N
/// guards in the order the check runs them (by last operand), i.e. the
/// shape of a smaller model: locals, globals, the first layers. All copies
/// share Base's object table and tensor specs.
std::shared_ptr<GuardSet> synthesize(const GuardSet &Base, size_t N,
                                     const std::string &Name) {
  auto S = std::make_shared<GuardSet>(Name);
  S->objects() = Base.objects();
  S->tensorSpecs() = Base.tensorSpecs();
  S->origins() = Base.origins();
  // The constructor made the root, value 0.
  size_t T = Base.guards().size();
  std::map<std::pair<size_t, ValueId>, ValueId> Cloned; // (copy, old) -> new
  std::function<ValueId(size_t, ValueId)> Clone = [&](size_t Copy,
                                                      ValueId Old) -> ValueId {
    if (Old == 0)
      return 0;
    auto It = Cloned.find({Copy, Old});
    if (It != Cloned.end())
      return It->second;
    Value V = Base.value(Old);
    V.Parent = Clone(Copy, V.Parent);
    ValueId New = static_cast<ValueId>(S->values().size());
    S->values().push_back(std::move(V));
    Cloned[{Copy, Old}] = New;
    return New;
  };
  std::vector<size_t> RunOrder(T);
  for (size_t I = 0; I < T; ++I)
    RunOrder[I] = I;
  auto LastOperand = [&](size_t I) {
    const auto &Ops = Base.guards()[I].Operands;
    return Ops.empty() ? 0 : *std::max_element(Ops.begin(), Ops.end());
  };
  std::stable_sort(RunOrder.begin(), RunOrder.end(), [&](size_t A, size_t B) {
    return LastOperand(A) < LastOperand(B);
  });
  for (size_t K = 0; K < N; ++K) {
    size_t Copy = N >= T ? K / T : 0;
    size_t Src = N >= T ? K % T : RunOrder[K];
    Guard G = Base.guards()[Src];
    for (ValueId &Op : G.Operands)
      Op = Clone(Copy, Op);
    S->guards().push_back(std::move(G));
  }
  return S;
}

struct CompileCase {
  std::string Name;
  std::shared_ptr<GuardSet> Set;
  std::unique_ptr<BoundGuardSet> Bound;
};

std::vector<std::unique_ptr<CompileCase>> &compileCases() {
  static std::vector<std::unique_ptr<CompileCase>> C;
  return C;
}

GuardJIT &engineAt(OptLevel L) {
  static std::unique_ptr<GuardJIT> Engines[4];
  auto &E = Engines[static_cast<int>(L)];
  if (!E) {
    JITOptions O;
    O.Level = L;
    O.ChunkSteps = benchChunkSteps();
    auto J = GuardJIT::create(O);
    if (!J)
      fail("cannot create the JIT: " + llvm::toString(J.takeError()));
    E = std::move(*J);
  }
  return *E;
}

/// CPU time of the calling thread (ms): compile() runs entirely on it (ORC
/// materializes on the looking-up thread), so on a shared machine this is
/// the work, where wall time also counts the other processes' share.
double threadCpuMs() {
  timespec T;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &T);
  return T.tv_sec * 1e3 + T.tv_nsec * 1e-6;
}

/// GUARDJIT_BENCH_TIME_PASSES=1: LLVM's per-pass timers (code generation's
/// legacy pass manager) around each case, printed to stderr after it. For
/// finding where a level's compile time goes; the timers add overhead, so
/// the counters of such a run are not the latency.
bool timePasses() {
  static const bool On = [] {
    const char *E = std::getenv("GUARDJIT_BENCH_TIME_PASSES");
    return E && *E && std::string(E) != "0";
  }();
  return On;
}

void runCompile(benchmark::State &St, const CompileCase *C, OptLevel L) {
  GuardJIT &J = engineAt(L);
  if (timePasses()) {
    llvm::reportAndResetTimings(&llvm::nulls()); // earlier cases' timers
    llvm::TimePassesIsEnabled = true;
  }
  CompileStats Sum;
  size_t Compiles = 0;
  double CpuMs = 0;
  for (auto _ : St) {
    double Cpu0 = threadCpuMs();
    auto R = J.compile(*C->Bound);
    CpuMs += threadCpuMs() - Cpu0;
    if (!R) {
      St.SkipWithError(llvm::toString(R.takeError()).c_str());
      return;
    }
    const CompileStats &S = (*R)->stats();
    Sum.LowerMs += S.LowerMs;
    Sum.CompileMs += S.CompileMs;
    Sum.OptimizeMs += S.OptimizeMs;
    Sum.CodegenMs += S.CodegenMs;
    Sum.LinkMs += S.LinkMs;
    Sum.NumGuards = S.NumGuards;
    Sum.NumIRInstructions = S.NumIRInstructions;
    Sum.NumIRBlocks = S.NumIRBlocks;
    Sum.CodeBytes = S.CodeBytes;
    Sum.ObjectBytes = S.ObjectBytes;
    ++Compiles;
    St.PauseTiming(); // freeing the code is not part of the latency
    R->reset();
    St.ResumeTiming();
  }
  if (timePasses()) {
    llvm::errs() << "=== pass timers: compile/" << C->Name << "/"
                 << optLevelName(L) << ", " << Compiles << " compiles\n";
    llvm::reportAndResetTimings(&llvm::errs());
    llvm::TimePassesIsEnabled = false;
  }
  if (!Compiles)
    return;
  double Guards = static_cast<double>(std::max<size_t>(Sum.NumGuards, 1));
  double N = static_cast<double>(Compiles);
  St.counters["guards"] = static_cast<double>(Sum.NumGuards);
  St.counters["ms_per_100_guards"] =
      (Sum.LowerMs + Sum.CompileMs) / N * 100.0 / Guards;
  St.counters["cpu_ms_per_100_guards"] = CpuMs / N * 100.0 / Guards;
  St.counters["lower_ms"] = Sum.LowerMs / N;
  St.counters["opt_ms"] = Sum.OptimizeMs / N;
  St.counters["codegen_ms"] = Sum.CodegenMs / N;
  St.counters["link_ms"] = Sum.LinkMs / N;
  St.counters["code_bytes"] = static_cast<double>(Sum.CodeBytes);
  St.counters["object_bytes"] = static_cast<double>(Sum.ObjectBytes);
  St.counters["code_bytes_per_1000_guards"] =
      static_cast<double>(Sum.CodeBytes) * 1000.0 / Guards;
  St.counters["ir_insts_per_guard"] =
      static_cast<double>(Sum.NumIRInstructions) / Guards;
  St.counters["ir_blocks_per_guard"] =
      static_cast<double>(Sum.NumIRBlocks) / Guards;
}

void addCase(const std::string &Name, std::shared_ptr<GuardSet> Set) {
  auto C = std::make_unique<CompileCase>();
  C->Name = Name;
  C->Set = std::move(Set);
  std::string Error;
  C->Bound = BoundGuardSet::bind(C->Set, &Error);
  if (!C->Bound)
    fail(Name + ": bind: " + Error);
  const CompileCase *P = C.get();
  compileCases().push_back(std::move(C));
  for (OptLevel L :
       {OptLevel::O0, OptLevel::Light, OptLevel::O1, OptLevel::O2})
    benchmark::RegisterBenchmark(
        ("compile/" + Name + "/" + optLevelName(L)).c_str(),
        [P, L](benchmark::State &St) { runCompile(St, P, L); })
        ->Unit(benchmark::kMillisecond)
        ->MinTime(0.2);
}

} // namespace

int benchChunkSteps() {
  const char *E = std::getenv("GUARDJIT_BENCH_CHUNK_STEPS");
  return E && *E ? std::atoi(E) : -1;
}

void registerCompileBenchmarks() {
  std::string Dir = GUARDJIT_CORPUS_DIR;
  if (const char *Env = std::getenv("GUARDJIT_CORPUS_DIR"))
    Dir = Env;
  std::vector<std::filesystem::path> Files;
  std::error_code EC;
  for (const auto &Entry : std::filesystem::directory_iterator(Dir, EC))
    if (Entry.path().extension() == ".gir")
      Files.push_back(Entry.path());
  if (EC || Files.empty()) {
    std::fprintf(stderr,
                 "guardjit-microbench: no corpus in '%s' (set "
                 "GUARDJIT_CORPUS_DIR); compile benchmarks skipped\n",
                 Dir.c_str());
    return;
  }
  std::sort(Files.begin(), Files.end());
  std::map<std::string, GuardSet> Parsed;
  for (const auto &Path : Files) {
    auto Buf = llvm::MemoryBuffer::getFile(Path.string());
    if (!Buf)
      fail("cannot read " + Path.string());
    auto Sets = parseGirString((*Buf)->getBuffer(), Path.string());
    if (!Sets)
      fail(llvm::toString(Sets.takeError()));
    std::string Stem = Path.stem().string(); // "gpt2.0_0"
    Stem = Stem.substr(0, Stem.find('.'));
    for (GuardSet &S : *Sets) {
      bindPlaceholders(S);
      Parsed.emplace(Stem, S);
      addCase(Stem, std::make_shared<GuardSet>(std::move(S)));
      break; // one set per corpus file
    }
  }
  // Synthetic sets: gpt2's kind mix (tensor, dict reads through nn.Module
  // __dict__s, module attributes, global state), thinned to 100 guards and
  // grown to 1,000 and 3,000 (2.3 and 6.9 copies of its per-layer paths; the
  // largest units of real models have ~2,700-3,000 guards).
  auto Base = Parsed.find("gpt2");
  if (Base == Parsed.end())
    Base = Parsed.begin();
  for (size_t N : {100, 1000, 3000})
    addCase("synthetic-" + std::to_string(N),
            synthesize(Base->second, N, "synthetic"));
}

} // namespace guardjit::bench

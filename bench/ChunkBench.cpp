//===- ChunkBench.cpp - The check split into chunks against one function --===//
//
// `check/chunks/<layers>`: the run time of one check compiled at O1 as one
// function (JITOptions::ChunkSteps = 0) and split into chunk functions (the
// O1 default), same bound set, same frame locals, interleaved in one
// process (docs: MEASURING.md). The set is the guard tree Dynamo builds for
// a torch.nn.ModuleList of `layers` small modules (per layer: the module by
// its key in `_modules`, its type, `training`, a float attribute, its
// Linear's type and `training`, weight and bias by identity: 7 guards and
// 10 dict reads), so all guards pass and the whole check runs.
// GUARDJIT_BENCH_CHUNK_STEPS sets the split side's chunk size (else O1's),
// GUARDJIT_BENCH_SPLIT_LLVM_ARGS LLVM options for its compile only. One
// iteration of the benchmark runs every round; counters:
//
//   guards            guards in the set
//   one_ns, split_ns  ns per check, medians over the rounds
//   split_over_one    median of the per-round ratios (min, max beside)
//   one_compile_ms, split_compile_ms   one compile of each (wall)
//
//===----------------------------------------------------------------------===//
#include "BenchSupport.h"

#include "guardjit/Runtime/Interpreter.h"

#include "benchmark/benchmark.h"
#include "llvm/Support/Error.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace guardjit::bench {

namespace {

[[noreturn]] void fail(const std::string &Msg) {
  if (PyErr_Occurred())
    PyErr_Print();
  std::fprintf(stderr, "guardjit-microbench (chunks): %s\n", Msg.c_str());
  std::exit(1);
}

std::unique_ptr<GuardJIT> engineWithChunks(int ChunkSteps) {
  JITOptions O;
  O.Level = OptLevel::O1;
  O.ChunkSteps = ChunkSteps;
  auto J = GuardJIT::create(O);
  if (!J)
    fail("cannot create the JIT: " + llvm::toString(J.takeError()));
  return std::move(*J);
}

/// The guard set of a ModuleList of `Layers` layers; `Locals` gets the
/// frame locals (new reference).
std::shared_ptr<GuardSet> moduleListSet(size_t Layers, PyObject **Locals) {
  exec("import torch\n"
       "class GjChunkLayer(torch.nn.Module):\n"
       "    def __init__(self):\n"
       "        super().__init__()\n"
       "        self.lin = torch.nn.Linear(4, 4)\n"
       "        self.scale = 0.5\n");
  PyObject *Model = eval("torch.nn.ModuleList([GjChunkLayer() for _ in range(" +
                         std::to_string(Layers) + ")])");
  *Locals = PyDict_New();
  PyDict_SetItemString(*Locals, "self", Model);
  SetBuilder SB;
  ObjectId LayerType = SB.object(eval("GjChunkLayer"));
  ObjectId LinearType = SB.object(eval("torch.nn.Linear"));
  ObjectId ListType = SB.object(eval("torch.nn.ModuleList"));
  ObjectId True = SB.object(Py_True);
  ObjectId Half = SB.object(eval("0.5"), ObjectKind::Constant);
  ValueId Self = SB.local("self");
  SB.guard(GuardKind::TypeMatch, {Self}, ListType);
  ValueId Mods = SB.keyed(AccessorKind::DictGetItem,
                          SB.unary(AccessorKind::GenericDict, Self),
                          "_modules");
  for (size_t I = 0; I < Layers; ++I) {
    std::string Key = std::to_string(I);
    ValueId L = SB.keyed(AccessorKind::DictGetItem, Mods, Key.c_str());
    SB.guard(GuardKind::TypeMatch, {L}, LayerType);
    ValueId LD = SB.unary(AccessorKind::GenericDict, L);
    SB.guard(GuardKind::IdMatch,
             {SB.keyed(AccessorKind::DictGetItem, LD, "training")}, True);
    SB.guard(GuardKind::EqualsMatch,
             {SB.keyed(AccessorKind::DictGetItem, LD, "scale")}, Half);
    ValueId Lin =
        SB.keyed(AccessorKind::DictGetItem,
                 SB.keyed(AccessorKind::DictGetItem, LD, "_modules"), "lin");
    SB.guard(GuardKind::TypeMatch, {Lin}, LinearType);
    ValueId LinD = SB.unary(AccessorKind::GenericDict, Lin);
    SB.guard(GuardKind::IdMatch,
             {SB.keyed(AccessorKind::DictGetItem, LinD, "training")}, True);
    ValueId Params = SB.keyed(AccessorKind::DictGetItem, LinD, "_parameters");
    PyObject *Layer = PySequence_GetItem(Model, static_cast<Py_ssize_t>(I));
    PyObject *LinObj = PyObject_GetAttrString(Layer, "lin");
    for (const char *P : {"weight", "bias"}) {
      PyObject *Param = PyObject_GetAttrString(LinObj, P);
      SB.guard(GuardKind::IdMatch,
               {SB.keyed(AccessorKind::DictGetItem, Params, P)},
               SB.object(Param));
      Py_DECREF(Param);
    }
    Py_DECREF(LinObj);
    Py_DECREF(Layer);
  }
  Py_DECREF(Model);
  return SB.S;
}

using Clock = std::chrono::steady_clock;

double nsPerCall(CheckFn Fn, PyObject *Locals, int Calls) {
  auto T0 = Clock::now();
  int Ok = 1;
  for (int I = 0; I < Calls; ++I)
    Ok &= Fn(Locals);
  auto T1 = Clock::now();
  if (!Ok)
    fail("a timed check failed");
  return std::chrono::duration<double, std::nano>(T1 - T0).count() / Calls;
}

double median(std::vector<double> V) {
  std::sort(V.begin(), V.end());
  size_t N = V.size();
  return N % 2 ? V[N / 2] : (V[N / 2 - 1] + V[N / 2]) / 2;
}

void runChunks(benchmark::State &St, size_t Layers) {
  static std::unique_ptr<GuardJIT> One = engineWithChunks(0);
  static std::unique_ptr<GuardJIT> Split = engineWithChunks(benchChunkSteps());
  PyObject *Locals = nullptr;
  std::shared_ptr<GuardSet> S = moduleListSet(Layers, &Locals);
  std::string Error;
  std::unique_ptr<BoundGuardSet> BS = BoundGuardSet::bind(S, &Error);
  if (!BS)
    fail("bind: " + Error);
  if (!interpret(*BS, Locals))
    fail("the interpreter fails the set");
  auto Compile = [&](GuardJIT &J, double &Ms) {
    auto T0 = Clock::now();
    auto C = J.compile(*BS);
    Ms = std::chrono::duration<double, std::milli>(Clock::now() - T0).count();
    if (!C)
      fail(llvm::toString(C.takeError()));
    return std::move(*C);
  };
  double OneMs = 0, SplitMs = 0;
  std::unique_ptr<CompiledCheck> A = Compile(*One, OneMs);
  // GUARDJIT_BENCH_SPLIT_LLVM_ARGS: LLVM options set after the one-function
  // side compiled, before the split side does (to price code-generation
  // passes in check time; they stay set, so filter one case per process).
  if (const char *Args = std::getenv("GUARDJIT_BENCH_SPLIT_LLVM_ARGS"))
    parseLLVMArgs(Args);
  std::unique_ptr<CompiledCheck> B = Compile(*Split, SplitMs);
  // Enough calls per round for ~5 ms of work per side.
  int Calls = std::max(20, static_cast<int>(5e6 / (3.0 * S->guards().size())));
  constexpr int Rounds = 61, Warmup = 5;
  std::vector<double> As, Bs, Ratios;
  for (auto _ : St) {
    for (int R = 0; R < Rounds; ++R) {
      double TA, TB;
      if (R % 2) { // alternate which side goes first
        TB = nsPerCall(B->function(), Locals, Calls);
        TA = nsPerCall(A->function(), Locals, Calls);
      } else {
        TA = nsPerCall(A->function(), Locals, Calls);
        TB = nsPerCall(B->function(), Locals, Calls);
      }
      if (R < Warmup)
        continue;
      As.push_back(TA);
      Bs.push_back(TB);
      Ratios.push_back(TB / TA);
    }
  }
  St.counters["guards"] = static_cast<double>(S->guards().size());
  St.counters["one_ns"] = median(As);
  St.counters["split_ns"] = median(Bs);
  St.counters["split_over_one"] = median(Ratios);
  St.counters["ratio_min"] = *std::min_element(Ratios.begin(), Ratios.end());
  St.counters["ratio_max"] = *std::max_element(Ratios.begin(), Ratios.end());
  St.counters["one_compile_ms"] = OneMs;
  St.counters["split_compile_ms"] = SplitMs;
  A.reset();
  B.reset();
  BS.reset();
  Py_DECREF(Locals);
}

} // namespace

void registerChunkBenchmarks() {
  for (size_t Layers : {15, 143, 400})
    benchmark::RegisterBenchmark(
        ("check/chunks/" + std::to_string(Layers)).c_str(),
        [Layers](benchmark::State &St) { runChunks(St, Layers); })
        ->Iterations(1)
        ->Unit(benchmark::kMillisecond);
}

} // namespace guardjit::bench

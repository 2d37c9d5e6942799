//===- BenchSupport.h - Shared pieces of the micro-benchmarks ---*- C++ -*-===//
//
// Every micro-benchmark checks one guard set of `N` guards of one kind, each
// on its own value, so that the JIT cannot merge them; the value is read as
// `L['t'][i]`, an inline tuple item (one load after a type and bounds test
// shared by all items), unless the accessor itself is what is measured. One
// case registers three benchmarks, `<case>/native`, `<case>/interpreter` and
// `<case>/floor`, each reporting `ns_per_guard` (the time of one whole check
// divided by N) beside Google Benchmark's time per check.
//
// The floor is C++ compiled ahead of time that makes the same reads as the
// guard and nothing else (e.g. TYPE_MATCH: one load of Py_TYPE and a compare
// per item), the modeled lower bound of any implementation.
//
// Everything runs on the main thread, which holds the GIL from Py_Initialize
// on (Main.cpp). Objects created here live until the process exits.
//
//===----------------------------------------------------------------------===//
#ifndef GUARDJIT_BENCH_BENCHSUPPORT_H
#define GUARDJIT_BENCH_BENCHSUPPORT_H

#include "guardjit/IR/GuardSet.h"
#include "guardjit/JIT/Engine.h"
#include "guardjit/Runtime/BoundGuardSet.h"
#include "guardjit/Runtime/Interpreter.h"
#include "guardjit/Runtime/Python.h"

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace guardjit::bench {

/// Guards per set (and items of `L['t']`).
constexpr int N = 64;

/// Runs Python statements in the shared namespace; aborts on an error.
void exec(const char *Src);
/// Evaluates an expression in the shared namespace; new reference, aborts on
/// an error.
PyObject *eval(const std::string &Expr);

/// Builds a guard set over live objects; every object it names is kept alive
/// for the life of the process.
class SetBuilder {
public:
  SetBuilder();
  ObjectId object(PyObject *O, ObjectKind K = ObjectKind::Object,
                  bool Strong = true);
  ObjectId str(const char *Text);
  ValueId local(const char *Name);
  /// parent[index] through an inline tuple read.
  ValueId item(ValueId Parent, int64_t Index);
  ValueId keyed(AccessorKind K, ValueId Parent, const char *Name);
  ValueId unary(AccessorKind K, ValueId Parent);
  Guard &guard(GuardKind K, std::vector<ValueId> Ops, ObjectId Obj = InvalidId,
               int64_t Int = 0);
  GuardSet &set() { return *S; }
  std::shared_ptr<GuardSet> S;
};

/// The reads of one check written as plain C++ (the floor); returns 1 iff
/// the guards would pass. Receives the frame locals dict.
using FloorFn = std::function<int(PyObject *FrameLocals)>;

/// A bound and compiled set with its frame locals and floor.
struct Case {
  std::string Name;
  std::unique_ptr<BoundGuardSet> Bound;
  std::unique_ptr<CompiledCheck> Native;
  PyObject *FrameLocals = nullptr; ///< owned
  FloorFn Floor;
  int Guards = N;
};

/// Binds and compiles `SB` at the engine's level, checks that native,
/// interpreter and floor all pass on `FrameLocals` (stolen), and registers
/// the three benchmarks. Aborts with a message on any failure: a benchmark
/// of a check that fails would time the failure path.
void registerCase(const std::string &Name, SetBuilder &SB,
                  PyObject *FrameLocals, FloorFn Floor, int Guards = N);

/// The engine all cases compile with: Light (the plugin's default) unless
/// GUARDJIT_BENCH_LEVEL names another level.
GuardJIT &engine();

/// The borrowed items of the tuple `L['t']` of `FrameLocals` (the floors'
/// common first read: one dict lookup, the tuple test).
PyObject *const *tupleItems(PyObject *FrameLocals);

/// Per-file registration, called from main after Py_Initialize.
void registerLeafGuardBenchmarks();
void registerAccessorBenchmarks();
void registerTensorBenchmarks();
void registerObjectCacheBenchmarks();
/// EvictionBench.cpp: resident memory over compile/evict cycles.
void registerEvictionBenchmarks();

/// A corpus set (tests/corpus/*.gir, or GUARDJIT_CORPUS_DIR) whose object
/// table is bound to stand-ins of each entry's kind (types, str keys, dicts,
/// callables where a guard calls one): enough to bind and compile it, and
/// to run code that is never called; the key and the code depend only on
/// the structure. Stand-ins live for the process.
struct CorpusSet {
  std::string Name; ///< file stem, ".N" for the N-th set of a file
  std::shared_ptr<GuardSet> Set;
};
std::vector<CorpusSet> corpusSets();
/// CompileBench.cpp: compile latency of the corpus and synthetic sets.
void registerCompileBenchmarks();
/// JITOptions::ChunkSteps for the compile and chunk benchmarks: the
/// GUARDJIT_BENCH_CHUNK_STEPS environment variable, else -1 (the level's).
int benchChunkSteps();
/// Sets LLVM options from the words of `Args` (Main.cpp; the bench binary
/// only: the library never sets an LLVM option). False on a bad option.
bool parseLLVMArgs(const char *Args);
/// ChunkBench.cpp: the check split into chunks against one function.
void registerChunkBenchmarks();

} // namespace guardjit::bench

#endif // GUARDJIT_BENCH_BENCHSUPPORT_H

//===- ObjectCacheBench.cpp - Object-cache hit time -----------------------===//
//
// `ObjectCache/hit/<set>`: the time of GuardJIT::compile when the set's
// object is in the on-disk cache (key, read, link into a fresh JITDylib,
// bind the addresses, look up the function), per compile; the counter
// `miss_ms` is the first, uncached compile of the same set and
// `guards` its size; `hit_cpu_us` is the thread CPU time of the hit alone,
// `link_us` its link (wall), `free_cpu_us` the CPU time of freeing the
// code (CompiledCheck's destructor). Sets: synthetic sets of 100 and 1,000
// guards (type, equality and dict-membership guards over tuple items and
// dict reads, so objects, memo slots and helper calls all appear) and every
// set of the corpus (tests/corpus, bound to stand-in objects: the hit path
// never runs the check, and the key and the code depend only on the
// structure).
//
// Cross-process: with GUARDJIT_CACHE_DIR set the cache lives there and
// survives the process; run twice, the second run's `first_hit` counters are
// 1 (its very first compile of each set already hit). Without it, a fresh
// private directory per run. Level: O0, the plugin's first tier
// (GUARDJIT_CACHE_BENCH_LEVEL=light|O1|O2 for another).
//
//===----------------------------------------------------------------------===//
#include "BenchSupport.h"

#include "guardjit/IR/Parser.h"
#include "guardjit/JIT/ObjectCache.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/ADT/StringRef.h"

#include "benchmark/benchmark.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>

#ifndef GUARDJIT_SOURCE_DIR
#define GUARDJIT_SOURCE_DIR "."
#endif

namespace guardjit::bench {

namespace {

std::string cacheDir() {
  static std::string Dir = [] {
    std::string FromEnv = cacheDirFromEnvironment();
    if (!FromEnv.empty())
      return FromEnv;
    static char Tmpl[] = "/tmp/guardjit-objcache-bench-XXXXXX";
    if (!mkdtemp(Tmpl)) {
      std::perror("mkdtemp");
      std::abort();
    }
    std::atexit([] { llvm::sys::fs::remove_directories(Tmpl); });
    return std::string(Tmpl);
  }();
  return Dir;
}

GuardJIT &cachedEngine() {
  static GuardJIT *E = [] {
    JITOptions O;
    // The plugin's first tier (issue 15's target is for it);
    // GUARDJIT_CACHE_BENCH_LEVEL=light|O1|O2 measures another level.
    O.Level = OptLevel::O0;
    if (const char *L = std::getenv("GUARDJIT_CACHE_BENCH_LEVEL")) {
      llvm::StringRef Name(L);
      O.Level = Name.equals_insensitive("light") ? OptLevel::Light
                : Name == "O1"                   ? OptLevel::O1
                : Name == "O2"                   ? OptLevel::O2
                                                 : OptLevel::O0;
    }
    O.CacheDir = cacheDir();
    O.HostVersions = "bench";
    auto J = GuardJIT::create(O);
    if (!J || (*J)->cacheInfo().Dir.empty()) {
      std::fprintf(stderr, "object cache bench: no cache: %s\n",
                   J ? (*J)->cacheInfo().Status.c_str()
                     : toString(J.takeError()).c_str());
      std::abort();
    }
    return J->release();
  }();
  return *E;
}

/// CPU time of the calling thread (s).
double threadCpuSeconds() {
  timespec TS;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &TS);
  return double(TS.tv_sec) + double(TS.tv_nsec) * 1e-9;
}

double msSince(std::chrono::steady_clock::time_point T) {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now() - T)
      .count();
}

/// Registers `ObjectCache/hit/<Name>` for `BS` (kept for the process).
void registerHit(const std::string &Name, std::unique_ptr<BoundGuardSet> BS) {
  GuardJIT &J = cachedEngine();
  auto T = std::chrono::steady_clock::now();
  auto First = J.compile(*BS);
  double FirstMs = msSince(T);
  if (!First) {
    std::fprintf(stderr, "%s: %s\n", Name.c_str(),
                 toString(First.takeError()).c_str());
    std::abort();
  }
  bool FirstHit = (*First)->stats().CacheHit;
  size_t Guards = (*First)->stats().NumGuards;
  First->reset();
  BoundGuardSet *Set = BS.release();
  benchmark::RegisterBenchmark(
      ("ObjectCache/hit/" + Name).c_str(),
      [Set, FirstMs, FirstHit, Guards](benchmark::State &St) {
        GuardJIT &J = cachedEngine();
        // Thread CPU time of the hit alone, of its link, and of freeing the
        // set's code (Google Benchmark's CPU time covers all of the loop).
        double HitCpu = 0, FreeCpu = 0, LinkMs = 0;
        for (auto _ : St) {
          auto T = std::chrono::steady_clock::now();
          double C0 = threadCpuSeconds();
          auto C = J.compile(*Set);
          double C1 = threadCpuSeconds();
          St.SetIterationTime(
              std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                            T)
                  .count());
          if (!C || !(*C)->stats().CacheHit) {
            St.SkipWithError("not a cache hit");
            if (!C)
              llvm::consumeError(C.takeError());
            break;
          }
          LinkMs += (*C)->stats().LinkMs;
          C->reset();
          HitCpu += C1 - C0;
          FreeCpu += threadCpuSeconds() - C1;
        }
        double Iters = double(std::max<benchmark::IterationCount>(
            St.iterations(), 1));
        St.counters["hit_cpu_us"] = HitCpu * 1e6 / Iters;
        St.counters["free_cpu_us"] = FreeCpu * 1e6 / Iters;
        St.counters["link_us"] = LinkMs * 1e3 / Iters;
        St.counters["guards"] = double(Guards);
        St.counters["first_ms"] = FirstMs;
        St.counters["first_hit"] = FirstHit;
      })
      ->UseManualTime()
      ->Unit(benchmark::kMicrosecond);
}

/// A synthetic set of about `Guards` guards.
void synthetic(int Guards) {
  SetBuilder SB;
  PyObject *IntType = eval("int");
  ObjectId Int = SB.object(IntType, ObjectKind::Type);
  ValueId T = SB.local("t");
  ValueId D = SB.local("d");
  int Made = 0;
  for (int I = 0; Made < Guards; ++I) {
    ValueId V = SB.item(T, I);
    SB.guard(GuardKind::TypeMatch, {V}, Int);
    ++Made;
    if (I % 2 == 0) {
      PyObject *C = PyLong_FromLong(I);
      SB.guard(GuardKind::EqualsMatch, {V},
               SB.object(C, ObjectKind::Constant));
      ++Made;
    }
    if (I % 4 == 0) {
      std::string Key = "k" + std::to_string(I);
      SB.guard(GuardKind::DictContains, {D}, SB.str(Key.c_str()), 1);
      ValueId Item = SB.keyed(AccessorKind::DictGetItem, D, Key.c_str());
      SB.guard(GuardKind::TypeMatch, {Item}, Int);
      Made += 2;
    }
  }
  std::string Error;
  auto BS = BoundGuardSet::bind(SB.S, &Error);
  if (!BS) {
    std::fprintf(stderr, "synthetic %d: %s\n", Guards, Error.c_str());
    std::abort();
  }
  registerHit("synthetic_" + std::to_string(Guards), std::move(BS));
}

/// Every corpus set (BenchSupport's stand-in binding).
void corpus() {
  for (CorpusSet &C : corpusSets()) {
    std::string Error;
    auto BS = BoundGuardSet::bind(C.Set, &Error);
    if (!BS) {
      std::fprintf(stderr, "object cache bench: %s not bound (%s)\n",
                   C.Name.c_str(), Error.c_str());
      continue;
    }
    registerHit(C.Name, std::move(BS));
  }
}

} // namespace

void registerObjectCacheBenchmarks() {
  synthetic(100);
  synthetic(1000);
  corpus();
}

} // namespace guardjit::bench

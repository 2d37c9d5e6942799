//===- EvictionBench.cpp - Resident memory over compile/evict cycles ------===//
//
// `Eviction/cycles`: issue 15's lifetime target at full size. Cycle i binds
// corpus set i mod N (BenchSupport's stand-ins), compiles it at the engine's
// level, and evicts it (the CompiledCheck and the BoundGuardSet destroyed,
// which is what the plugin does when a cache entry dies and what the
// embedding API's evict() does). Resident memory (VmRSS, after
// `malloc_trim(0)`) is read after a warm-up of one pass over the corpus and
// then every 500 cycles; the counters are `cycles`, `rss_growth_bytes_per_cycle`
// (least-squares slope over the samples) and `rss_mb_after_warmup`. Target:
// < 1 KB per cycle. GUARDJIT_EVICTION_CYCLES sets the count (default 10,000).
// The small size runs in the test suite: tests/unit/JIT/EvictionStressTest.cpp.
//
//===----------------------------------------------------------------------===//
#include "BenchSupport.h"

#include "benchmark/benchmark.h"

#include <malloc.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace guardjit::bench {

namespace {

/// Resident set size in bytes (/proc/self/statm, second field).
double residentBytes() {
  size_t Size = 0, Resident = 0;
  if (FILE *F = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(F, "%zu %zu", &Size, &Resident) != 2)
      Resident = 0;
    std::fclose(F);
  }
  return static_cast<double>(Resident) * 4096.0;
}

double slope(const std::vector<double> &X, const std::vector<double> &Y) {
  double N = static_cast<double>(X.size()), MX = 0, MY = 0;
  for (size_t I = 0; I < X.size(); ++I)
    MX += X[I] / N, MY += Y[I] / N;
  double Num = 0, Den = 0;
  for (size_t I = 0; I < X.size(); ++I) {
    Num += (X[I] - MX) * (Y[I] - MY);
    Den += (X[I] - MX) * (X[I] - MX);
  }
  return Den > 0 ? Num / Den : 0;
}

void cycles(benchmark::State &St) {
  static std::vector<CorpusSet> Sets = corpusSets();
  if (Sets.empty()) {
    St.SkipWithError("no corpus set");
    return;
  }
  long Cycles = 10000;
  if (const char *E = std::getenv("GUARDJIT_EVICTION_CYCLES"))
    Cycles = std::max(1L, std::atol(E));
  GuardJIT &J = engine();
  auto Cycle = [&](long I) -> bool {
    std::string Error;
    auto BS = BoundGuardSet::bind(Sets[I % Sets.size()].Set, &Error);
    if (!BS) {
      St.SkipWithError(("bind: " + Error).c_str());
      return false;
    }
    auto C = J.compile(*BS);
    if (!C) {
      St.SkipWithError(llvm::toString(C.takeError()).c_str());
      return false;
    }
    return true; // both destroyed here: the eviction
  };
  for (auto _ : St) {
    for (size_t I = 0; I < Sets.size(); ++I) // warm-up: one pass
      if (!Cycle(static_cast<long>(I)))
        return;
    malloc_trim(0);
    double After = residentBytes();
    std::vector<double> X{0}, Y{After};
    for (long I = 1; I <= Cycles; ++I) {
      if (!Cycle(I))
        return;
      if (I % 500 == 0 || I == Cycles) {
        malloc_trim(0);
        X.push_back(static_cast<double>(I));
        Y.push_back(residentBytes());
      }
    }
    St.counters["cycles"] = static_cast<double>(Cycles);
    St.counters["sets"] = static_cast<double>(Sets.size());
    St.counters["rss_mb_after_warmup"] = After / (1024.0 * 1024.0);
    St.counters["rss_mb_end"] = Y.back() / (1024.0 * 1024.0);
    St.counters["rss_growth_bytes_per_cycle"] = slope(X, Y);
  }
}

} // namespace

void registerEvictionBenchmarks() {
  benchmark::RegisterBenchmark("Eviction/cycles", cycles)
      ->Iterations(1)
      ->Unit(benchmark::kSecond);
}

} // namespace guardjit::bench

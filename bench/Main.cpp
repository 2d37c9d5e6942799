//===- Main.cpp - guardjit-microbench entry point -------------------------===//
//
// Embeds CPython, imports torch and installs the ATen-backed TorchHooks (as
// the Python module does on import), registers every case, runs Google
// Benchmark. The process keeps the GIL throughout; no Py_Finalize (compiled
// checks and bound sets live until exit).
//
//===----------------------------------------------------------------------===//
#include "BenchSupport.h"

#include "guardjit/TorchRuntime/TorchRuntime.h"

#include "benchmark/benchmark.h"

int main(int argc, char **argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv))
    return 1;
  Py_InitializeEx(0);
  guardjit::bench::exec("import torch\ntorch.set_num_threads(1)\n");
  guardjit::installTorchRuntime();
  guardjit::bench::registerLeafGuardBenchmarks();
  guardjit::bench::registerAccessorBenchmarks();
  guardjit::bench::registerTensorBenchmarks();
  guardjit::bench::registerObjectCacheBenchmarks();
  guardjit::bench::registerCompileBenchmarks();
  guardjit::bench::registerChunkBenchmarks();
  guardjit::bench::registerEvictionBenchmarks();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

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
#include "llvm/Support/CommandLine.h"

#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

bool guardjit::bench::parseLLVMArgs(const char *Args) {
  std::istringstream In(Args);
  std::vector<std::string> Words{"guardjit-microbench"};
  for (std::string W; In >> W;)
    Words.push_back(W);
  std::vector<const char *> Argv;
  for (const std::string &W : Words)
    Argv.push_back(W.c_str());
  llvm::cl::ResetAllOptionOccurrences();
  return llvm::cl::ParseCommandLineOptions(static_cast<int>(Argv.size()),
                                          Argv.data());
}

int main(int argc, char **argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv))
    return 1;
  // GUARDJIT_BENCH_LLVM_ARGS: LLVM options for this process (e.g.
  // "-disable-machine-cse"), to measure what a code-generation pass costs
  // and buys.
  if (const char *Args = std::getenv("GUARDJIT_BENCH_LLVM_ARGS"))
    if (!guardjit::bench::parseLLVMArgs(Args))
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

//===- FuzzerSupport.h - Shared helpers of the libFuzzer targets -*- C++ -*-===//
#ifndef GUARDJIT_TESTS_FUZZ_FUZZERSUPPORT_H
#define GUARDJIT_TESTS_FUZZ_FUZZERSUPPORT_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/SourceMgr.h"

#include <cstdio>
#include <cstdlib>

namespace guardjit::fuzz {

/// SourceMgr diagnostic handler that drops messages: diagnostics are the
/// expected outcome of most inputs, and printing them slows fuzzing down.
inline void discardDiagnostic(const llvm::SMDiagnostic &, void *) {}

/// Reports a broken property with the texts involved, then aborts so that
/// libFuzzer saves the input as a crash.
[[noreturn]] inline void fail(const char *What, llvm::StringRef A,
                              llvm::StringRef B) {
  std::fprintf(stderr, "fuzz property violated: %s\n--- first ---\n%.*s\n"
                       "--- second ---\n%.*s\n",
               What, static_cast<int>(A.size()), A.data(),
               static_cast<int>(B.size()), B.data());
  std::abort();
}

} // namespace guardjit::fuzz

#endif // GUARDJIT_TESTS_FUZZ_FUZZERSUPPORT_H

//===- GuardIROptDriver.h - The guard-ir-opt driver -------------*- C++ -*-===//
//
// The whole of guard-ir-opt except `main`, as llvm/tools/opt's optdriver.cpp
// is for opt. Its command-line options are llvm::cl globals in this library
// only: it must never be linked into a library loaded by Python, where they
// would be registered in a process that may hold another copy of LLVM.
//
//===----------------------------------------------------------------------===//
#ifndef GUARDJIT_TOOLS_GUARDIROPTDRIVER_H
#define GUARDJIT_TOOLS_GUARDIROPTDRIVER_H

namespace guardjit {

/// Runs guard-ir-opt: reads .gir (a file or `-` for stdin), verifies it and
/// writes it back as IR, LLVM IR or assembly. Returns the exit code.
int guardIROptMain(int Argc, char **Argv);

} // namespace guardjit

#endif // GUARDJIT_TOOLS_GUARDIROPTDRIVER_H

//===- guard-ir-opt.cpp - Reads, verifies and prints Guard IR -------------===//
//
// Usage: guard-ir-opt [options] <input.gir | ->
// The flags and the work are in lib/Tools (GuardIROptDriver): this file stays
// a `main`, like llvm/tools/opt/opt.cpp over optdriver.cpp.
//
//===----------------------------------------------------------------------===//
#include "guardjit/Tools/GuardIROptDriver.h"

int main(int Argc, char **Argv) { return guardjit::guardIROptMain(Argc, Argv); }

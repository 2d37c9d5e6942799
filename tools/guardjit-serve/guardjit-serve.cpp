//===- guardjit-serve.cpp - serve AOTInductor packages, no Python ---------===//
//
// A C++ serving host: AOTInductor packages of one model behind guardjit's
// portable guard sets (ServeHost.h). Everything is in the driver.
//
//===----------------------------------------------------------------------===//
#include "ServeDriver.h"

#include "llvm/Support/InitLLVM.h"

int main(int Argc, char **Argv) {
  llvm::InitLLVM X(Argc, Argv);
  return guardjit::serve::serveMain(Argc, Argv);
}

//===- LLVMProvider.h - GuardJIT as a CodeProvider -------------*- C++ -*-===//
//
// The one place that knows both sides, as PostgreSQL's llvmjit.c implements
// jit.h's provider callbacks: a GuardJIT engine (JIT/Engine.h) compiles, a
// CompiledCheck owns the code. Only forward declarations here: a front door
// can name the provider without seeing LLVM.
//
//===----------------------------------------------------------------------===//
#ifndef GUARDJIT_CHECK_LLVMPROVIDER_H
#define GUARDJIT_CHECK_LLVMPROVIDER_H

#include "guardjit/Check/CodeProvider.h"

#include <memory>

namespace guardjit {

class CompiledCheck;
class GuardJIT;

/// A provider compiling with `Engine` at its level (OptLevel as int). The
/// provider shares ownership of the engine: code it made keeps both alive.
std::shared_ptr<CodeProvider>
makeLLVMProvider(std::shared_ptr<GuardJIT> Engine);

/// `Code` (compiled by a GuardJIT engine, which must outlive it) as a
/// CheckCode.
std::shared_ptr<CheckCode>
wrapCompiledCheck(std::shared_ptr<CompiledCheck> Code);

/// The CompiledCheck behind code an LLVM provider made (or wrapped), else
/// null.
const CompiledCheck *compiledCheckOf(const CheckCode &Code);

} // namespace guardjit

#endif // GUARDJIT_CHECK_LLVMPROVIDER_H

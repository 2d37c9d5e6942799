//===- Engine.h - ORC LLJIT engine for guard sets ---------------*- C++ -*-===//
//
// Compiles one BoundGuardSet to one native check function (guardjit::CheckFn)
// with LLVM ORC's LLJIT. Each compiled set owns a ResourceTracker; dropping
// the CompiledCheck frees its code. Runtime helpers are reached through
// absolute symbols.
//
// Thread/GIL: compile() does not touch Python objects except through the
// addresses already bound in the BoundGuardSet; it may run without the GIL.
// The BoundGuardSet must outlive the compiled function.
//
//===----------------------------------------------------------------------===//
#ifndef GUARDJIT_JIT_ENGINE_H
#define GUARDJIT_JIT_ENGINE_H

#include "guardjit/Runtime/BoundGuardSet.h"
#include "guardjit/Runtime/Interpreter.h"

#include "llvm/Support/Error.h"

#include <memory>
#include <string>

namespace llvm::orc {
class LLJIT;
class ResourceTracker;
} // namespace llvm::orc

namespace guardjit {

enum class OptLevel { O0, Light, O2 };

struct JITOptions {
  OptLevel Level = OptLevel::Light;
};

/// Per-compile statistics.
struct CompileStats {
  double LowerMs = 0;   ///< Guard IR -> LLVM IR
  double CompileMs = 0; ///< LLVM IR -> machine code (incl. lookup)
  size_t NumGuards = 0;
  size_t NumInlined = 0;  ///< guards emitted as inline loads/compares
  size_t NumHelpers = 0;  ///< guards emitted as runtime helper calls
};

/// A compiled check function; frees its code when destroyed.
class CompiledCheck {
public:
  ~CompiledCheck();
  CheckFn function() const { return Fn; }
  const CompileStats &stats() const { return Stats; }

private:
  friend class GuardJIT;
  CompiledCheck() = default;
  CheckFn Fn = nullptr;
  CompileStats Stats;
  llvm::IntrusiveRefCntPtr<llvm::orc::ResourceTracker> Tracker;
};

class GuardJIT {
public:
  static llvm::Expected<std::unique_ptr<GuardJIT>> create(JITOptions Opts = {});
  ~GuardJIT();

  /// Lowers and compiles `Set`. The result must be destroyed before this
  /// engine.
  llvm::Expected<std::unique_ptr<CompiledCheck>> compile(const BoundGuardSet &Set);

  /// The textual LLVM IR (`--emit=llvm`) / assembly (`--emit=asm`) of `Set`.
  llvm::Expected<std::string> emitLLVM(const BoundGuardSet &Set);
  llvm::Expected<std::string> emitAssembly(const BoundGuardSet &Set);

private:
  GuardJIT(std::unique_ptr<llvm::orc::LLJIT> J, JITOptions Opts);
  std::unique_ptr<llvm::orc::LLJIT> J;
  JITOptions Opts;
  unsigned Counter = 0;
};

} // namespace guardjit

#endif // GUARDJIT_JIT_ENGINE_H

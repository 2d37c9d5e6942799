//===- Engine.h - ORC LLJIT engine for guard sets ---------------*- C++ -*-===//
//
// Compiles one BoundGuardSet to one native check function (guardjit::CheckFn)
// with LLVM ORC's LLJIT. Each compiled set owns a ResourceTracker; dropping
// the CompiledCheck frees its code. Runtime helpers are reached through
// absolute symbols.
//
// Thread/GIL: compile(), emitLLVM() and emitAssembly() read only the IR and
// the addresses already bound in the BoundGuardSet, never a Python object, so
// they may run without the GIL and from several threads (IR passes and code
// generation are serialized per engine; lowering is not). Calling the
// compiled function needs the GIL. The BoundGuardSet must outlive the
// compiled function (its object addresses and payloads are immediates).
//
// Code levels (compile ms per 100 guards, thread CPU time on a 2 vCPU EPYC
// shared with other jobs, noisy; docs/performance.md "Compile latency"):
//   O0    compact lowering with the memo tests as calls
//         (LoweringOptions::CallMemo); no IR pass; codegen
//         CodeGenOptLevel::None with FastISel (~5).
//   Light compact lowering with the memo hits inline
//         (LoweringOptions::Compact); early-cse; codegen as O0 (~6-10).
//   O1    the full inline lowering, early-cse + simplifycfg; codegen
//         CodeGenOptLevel::Less with FastISel, i.e. the greedy register
//         allocator (~60-250, growing with the size of the function): the
//         background tier (TierUp.h).
//   O2    the full inline lowering, the PassBuilder O2 pipeline; codegen
//         CodeGenOptLevel::Default (~150-450).
//
//===----------------------------------------------------------------------===//
#ifndef GUARDJIT_JIT_ENGINE_H
#define GUARDJIT_JIT_ENGINE_H

#include "guardjit/Runtime/BoundGuardSet.h"
#include "guardjit/Runtime/Interpreter.h"

#include "llvm/ADT/IntrusiveRefCntPtr.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace llvm {
class Module;
class TargetMachine;
namespace orc {
class LLJIT;
class ResourceTracker;
} // namespace orc
} // namespace llvm

namespace guardjit {

enum class OptLevel { O0, Light, O1, O2 };

struct JITOptions {
  OptLevel Level = OptLevel::Light;
  /// Run the LLVM verifier on every lowered module (about as costly as the
  /// lowering itself); a failure is an Error, not a crash in codegen. Always
  /// on in builds of guardjit without NDEBUG.
  bool VerifyIR = false;
};

/// Per-compile statistics.
struct CompileStats {
  double LowerMs = 0;   ///< Guard IR -> LLVM IR, incl. verification (ms)
  double CompileMs = 0; ///< LLVM IR -> machine code, incl. IR passes,
                        ///< linking and lookup (ms)
  /// The parts of CompileMs (ms): this level's IR passes, code generation
  /// (instruction selection to object file), and the rest (adding the
  /// module, JITLink, the symbol lookup).
  double OptimizeMs = 0;
  double CodegenMs = 0;
  double LinkMs = 0;
  size_t NumGuards = 0;
  size_t NumInlined = 0;  ///< guards emitted as inline loads/compares
  size_t NumHelpers = 0;  ///< guards emitted as runtime helper calls
  /// LLVM IR as lowered, before this level's passes.
  size_t NumIRInstructions = 0;
  size_t NumIRBlocks = 0;
  /// Machine code: the size of the text sections of the emitted object
  /// (bytes), and of the whole relocatable object (headers, relocations,
  /// symbols included).
  size_t CodeBytes = 0;
  size_t ObjectBytes = 0;
};

/// A compiled check function; frees its code when destroyed.
class CompiledCheck {
public:
  /// Removes the code through its ResourceTracker. Must not run while any
  /// thread executes function(). Errors go to the engine's error log
  /// (GuardJIT::takeReportedErrors); never throws.
  ~CompiledCheck();
  CompiledCheck(const CompiledCheck &) = delete;
  CompiledCheck &operator=(const CompiledCheck &) = delete;

  /// The native check; valid while this object lives. Call with the GIL.
  CheckFn function() const { return Fn; }
  const CompileStats &stats() const { return Stats; }
  /// The JIT symbol of the function (unique within its engine).
  const std::string &symbol() const { return Symbol; }
  /// The code level of the engine that compiled it.
  OptLevel level() const { return Level; }

private:
  friend class GuardJIT;
  CompiledCheck() = default;
  CheckFn Fn = nullptr;
  CompileStats Stats;
  std::string Symbol;
  OptLevel Level = OptLevel::Light;
  llvm::IntrusiveRefCntPtr<llvm::orc::ResourceTracker> Tracker;
};

class GuardJIT {
public:
  /// Creates an engine for the host. Initializes the native target once per
  /// process. Fails when the host target is unavailable.
  static llvm::Expected<std::unique_ptr<GuardJIT>> create(JITOptions Opts = {});
  ~GuardJIT();
  GuardJIT(const GuardJIT &) = delete;
  GuardJIT &operator=(const GuardJIT &) = delete;

  const JITOptions &options() const { return Opts; }

  /// Lowers and compiles `Set` into its own module and ResourceTracker. The
  /// result must be destroyed before this engine; `Set` must outlive it.
  llvm::Expected<std::unique_ptr<CompiledCheck>>
  compile(const BoundGuardSet &Set);

  /// The textual LLVM IR (`--emit=llvm`, after this engine's IR passes) and
  /// assembly (`--emit=asm`, with this engine's codegen level) of `Set`.
  /// Nothing is added to the JIT.
  llvm::Expected<std::string> emitLLVM(const BoundGuardSet &Set);
  llvm::Expected<std::string> emitAssembly(const BoundGuardSet &Set);
  /// The same for IR without live objects (parsed .gir): addresses become
  /// external symbols (lowerGuardSetSymbolic in JIT/Lowering.h). Reads only
  /// `Set`; no Python, no GIL.
  llvm::Expected<std::string> emitLLVM(const GuardSet &Set);
  llvm::Expected<std::string> emitAssembly(const GuardSet &Set);

  /// Looks up a compiled check by CompiledCheck::symbol(); fails once it is
  /// destroyed (used by tests to see that code was removed).
  llvm::Expected<CheckFn> lookup(llvm::StringRef Symbol);

  /// Errors ORC reported asynchronously (e.g. a failed code removal) since the
  /// last call; they are never printed.
  std::vector<std::string> takeReportedErrors();

private:
  GuardJIT(std::unique_ptr<llvm::orc::LLJIT> J, JITOptions Opts);
  void reportError(llvm::Error E);
  /// Lowers `Set` into a fresh context and module (shared by compile/emit);
  /// names are kept only for emitted text.
  struct Lowered;
  llvm::Expected<Lowered> lower(const BoundGuardSet &Set, bool KeepNames);
  /// `Bound` null: symbolic addresses.
  llvm::Expected<Lowered> lower(const GuardSet &S, const BoundGuardSet *Bound,
                                bool KeepNames);
  /// The bodies of emitLLVM / emitAssembly, after lowering.
  std::string printLowered(Lowered &L);
  llvm::Expected<std::string> assembleLowered(Lowered &L);
  /// Runs this engine's IR pipeline over `M`. Caller holds CodegenLock.
  void optimize(llvm::Module &M);

  std::unique_ptr<llvm::orc::LLJIT> J;
  JITOptions Opts;
  std::atomic<unsigned> Counter{0};
  /// Host target machine for IR passes (TTI) and assembly output.
  std::unique_ptr<llvm::TargetMachine> TM;
  /// Serializes IR passes and code generation: LLJIT's default compiler and
  /// TM are shared by all compiles of this engine.
  std::mutex CodegenLock;
  /// Where the layers record the phases of the compile in progress (the
  /// one holding CodegenLock); null outside compile().
  struct PhaseClock;
  PhaseClock *Phases = nullptr;
  std::mutex ErrorLock;
  std::vector<std::string> ReportedErrors;
};

} // namespace guardjit

#endif // GUARDJIT_JIT_ENGINE_H

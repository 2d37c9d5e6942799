//===- Engine.h - ORC LLJIT engine for guard sets ---------------*- C++ -*-===//
//
// Compiles one BoundGuardSet to one native check function (guardjit::CheckFn)
// with LLVM ORC's LLJIT. Each compiled set owns a JITDylib holding its code;
// with the object cache the code is relocatable (lowerGuardSetRelocatable)
// and its address symbols are bound to the BoundGuardSet's addresses at link
// time, else the addresses are baked in (lowerGuardSet); dropping the
// CompiledCheck
// removes the JITDylib and frees the code. Runtime helpers and CPython's
// statics are reached through absolute symbols. With a cache directory the
// object is reused across processes (JIT/ObjectCache.h).
//
// Thread/GIL: compile(), emitLLVM() and emitAssembly() read only the IR and
// the addresses already bound in the BoundGuardSet, never a Python object, so
// they may run without the GIL and from several threads (IR passes and code
// generation are serialized per engine; lowering is not). Calling the
// compiled function needs the GIL. The BoundGuardSet must outlive the
// compiled function (its addresses are in the code).
//
// Code levels (compile ms per 100 guards, thread CPU time on a 2 vCPU EPYC
// shared with other jobs, noisy; docs/performance.md "Compile latency"):
//   O0    compact lowering with the reads as descriptor calls and the
//         simple guards after them fused into the calls
//         (LoweringOptions::CallMemo); no IR pass; codegen
//         CodeGenOptLevel::None with FastISel (~1-2; 1,000 guards ~11 ms,
//         ~52 bytes of code per guard).
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

#include "guardjit/JIT/Lowering.h"
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
class MemoryBuffer;
class Module;
class TargetMachine;
namespace orc {
class JITDylib;
class LLJIT;
} // namespace orc
} // namespace llvm

namespace guardjit {

class ObjectCache;
struct ObjectCacheStats;

enum class OptLevel { O0, Light, O1, O2 };

/// "O0", "light", "O1" or "O2": the spelling of the Python binding,
/// guard-ir-opt's --opt-level and GUARDJIT_OPT.
const char *optLevelName(OptLevel L);

struct JITOptions {
  OptLevel Level = OptLevel::Light;
  /// Run the LLVM verifier on every lowered module (about as costly as the
  /// lowering itself); a failure is an Error, not a crash in codegen. Always
  /// on in builds of guardjit without NDEBUG.
  bool VerifyIR = false;
  /// The on-disk object cache (JIT/ObjectCache.h, docs/object-cache.md):
  /// its directory, empty for none. A directory that cannot be used turns
  /// the cache off (GuardJIT::cacheStatus says why); compiles still work.
  std::string CacheDir;
  /// What the cache key must cover about the host that this library cannot
  /// see, e.g. "cpython-311-x86_64-linux-gnu torch=2.13.0".
  std::string HostVersions;
  /// Steps per chunk function of a large set (LoweringOptions::ChunkSteps):
  /// -1 the level's own (split at O1, one function at the other levels),
  /// 0 one function (for measuring the split against it).
  int ChunkSteps = -1;
};

/// Per-compile statistics.
struct CompileStats {
  double LowerMs = 0;   ///< Guard IR -> LLVM IR, incl. verification (ms)
  double CompileMs = 0; ///< LLVM IR -> machine code, incl. IR passes,
                        ///< linking and lookup (ms)
  /// The parts of CompileMs (ms): this level's IR passes, code generation
  /// (instruction selection to object file), and the link (adding the
  /// object, JITLink, the symbol lookup; on an object-cache hit, the link
  /// of the cached object, inside CacheMs). CompileMs also covers freeing
  /// the module and its context, which none of the three counts.
  double OptimizeMs = 0;
  double CodegenMs = 0;
  double LinkMs = 0;
  size_t NumGuards = 0;
  size_t NumInlined = 0;  ///< guards emitted as inline loads/compares
  size_t NumHelpers = 0;  ///< guards emitted as runtime helper calls
  /// The object came from the on-disk cache: no lowering, no LLVM passes
  /// (LowerMs is 0; the counts above are the cached compile's).
  bool CacheHit = false;
  /// Time spent in the object cache (ms): on a hit the whole compile (key,
  /// read, link, bind); on a miss the key, the failed lookup and the store.
  double CacheMs = 0;
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
  /// Removes the code with its JITDylib. Must not run while any
  /// thread executes function(). Errors go to the engine's error log
  /// (GuardJIT::takeReportedErrors); never throws.
  ~CompiledCheck();
  CompiledCheck(const CompiledCheck &) = delete;
  CompiledCheck &operator=(const CompiledCheck &) = delete;

  /// The native check; valid while this object lives. Call with the GIL.
  CheckFn function() const { return Fn; }
  const CompileStats &stats() const { return Stats; }
  /// The name of the function's JITDylib (unique within its engine), for
  /// GuardJIT::lookup.
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
  /// The set's own JITDylib (its code and address table); removed with it.
  llvm::orc::JITDylib *Dylib = nullptr;
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

  /// Lowers and compiles `Set` into its own module and JITDylib (or, on an
  /// object-cache hit, links the cached object there). The
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

  /// The object cache's directory and counters; Dir empty when there is no
  /// cache (then `Status` says why when one was asked for).
  struct CacheInfo {
    std::string Dir;
    std::string Status;
    uint64_t Hits = 0, Misses = 0, Rejected = 0, Stores = 0, StoreErrors = 0;
  };
  CacheInfo cacheInfo() const;

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
  /// Links `Object` (relocatable code of `Set`) into a new JITDylib for
  /// `Result`, binding its address symbols to `Set`'s addresses by `Table`,
  /// and looks up the function. On failure nothing is left in the JIT.
  llvm::Error link(CompiledCheck &Result, const BoundGuardSet &Set,
                   std::unique_ptr<llvm::MemoryBuffer> Object,
                   llvm::ArrayRef<TableSlot> Table);

  std::unique_ptr<llvm::orc::LLJIT> J;
  JITOptions Opts;
  std::atomic<unsigned> Counter{0};
  /// Host target machine for IR passes (TTI) and assembly output.
  std::unique_ptr<llvm::TargetMachine> TM;
  /// Serializes IR passes and code generation: LLJIT's default compiler and
  /// TM are shared by all compiles of this engine.
  std::mutex CodegenLock;
  std::mutex ErrorLock;
  std::vector<std::string> ReportedErrors;
  /// Null when off; CacheStatus says why when a directory was given.
  std::unique_ptr<ObjectCache> Cache;
  std::string CacheStatus;
  /// The engine and host part of every cache key (engineFingerprint).
  std::string Fingerprint;
  /// The linker plugin that binds address symbols (owned by the linker).
  class AddressBinder;
  AddressBinder *Binder = nullptr;
};

} // namespace guardjit

#endif // GUARDJIT_JIT_ENGINE_H

//===- Engine.cpp - ORC LLJIT engine for guard sets -----------------------===//
//
// One LLJIT per engine; one LLVMContext + module + JITDylib per guard set, so
// a set's code can be freed independently of every other set. The engine
// compiles each module to a relocatable object itself (so the object can be
// cached) and links it with JITLink. The only TU of guardjit that includes
// LLJIT.h (about 10 s to compile).
//
//===----------------------------------------------------------------------===//
#include "guardjit/JIT/Engine.h"

#include "guardjit/JIT/Lowering.h"
#include "guardjit/JIT/ObjectCache.h"

#include "llvm/ExecutionEngine/Orc/CompileUtils.h"
#include "llvm/ExecutionEngine/Orc/Core.h"
#include "llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h"
#include "llvm/ExecutionEngine/Orc/LLJIT.h"
#include "llvm/ExecutionEngine/Orc/ObjectLinkingLayer.h"
#include "llvm/ExecutionEngine/Orc/ObjectTransformLayer.h"
#include "llvm/ExecutionEngine/Orc/ThreadSafeModule.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/IR/Verifier.h"
#include "llvm/Object/ObjectFile.h"
#include "llvm/Passes/PassBuilder.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/Transforms/Scalar/EarlyCSE.h"
#include "llvm/Transforms/Scalar/SimplifyCFG.h"

#include <chrono>
#include <mutex>

using namespace llvm;
using namespace llvm::orc;

namespace guardjit {

namespace {

using Clock = std::chrono::steady_clock;

double msSince(Clock::time_point Start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - Start)
      .count();
}

/// A symbol-safe spelling of a guard set name ("unit 3" -> "unit_3").
std::string sanitize(StringRef Name) {
  std::string Out;
  for (char C : Name.take_front(48))
    Out += isAlnum(C) ? C : '_';
  return Out.empty() ? "unit" : Out;
}

#ifdef NDEBUG
constexpr bool AlwaysVerify = false;
#else
constexpr bool AlwaysVerify = true;
#endif

CodeGenOptLevel codeGenLevel(OptLevel L) {
  // Light keeps O0 code generation (FastISel). Measured on 100 guards (80
  // inline, 20 helper calls, 100 value reads; 2 vCPU EPYC): Light with
  // Default codegen compiled in ~30-40 ms against ~3-5 ms with O0 codegen.
  // O1 trades that compile time for the greedy register allocator: O0's fast
  // allocator spills every value live across a block, and guard code is one
  // block per step (docs/performance.md, "Tiered compilation").
  switch (L) {
  case OptLevel::O0:
  case OptLevel::Light:
    return CodeGenOptLevel::None;
  case OptLevel::O1:
    return CodeGenOptLevel::Less;
  case OptLevel::O2:
    return CodeGenOptLevel::Default;
  }
  return CodeGenOptLevel::None;
}

/// See chunkSteps.
constexpr uint32_t DefaultChunkSteps = 256;

const char *levelName(OptLevel L) {
  switch (L) {
  case OptLevel::O0:
    return "O0";
  case OptLevel::Light:
    return "Light(early-cse,simplifycfg;codegen=None,fast-isel)";
  case OptLevel::O1:
    return "O1(early-cse,simplifycfg;codegen=Less,fast-isel)";
  case OptLevel::O2:
    return "O2(default<O2>;codegen=Default)";
  }
  return "?";
}

/// Steps (value reads and guards) per chunk function at `O.Level`
/// (LoweringOptions::ChunkSteps), unless JITOptions::ChunkSteps says.
/// O1's code generation is super-linear in a function's size (greedy
/// register allocation, machine CSE, the execution-domain fix: 124 ms of
/// CPU per 100 guards at 1,000 guards against 38 at 100); O0's is linear,
/// and its latency is the first tier's, so it stays one function.
/// Measured (guardjit-microbench compile/ and check/chunks/, 2 vCPU,
/// loaded): chunks of 64 / 256 / 512 / 1,024 steps compile 1,000 guards at
/// 37 / 35 / 41 / 81 ms per 100 guards; the check of 100-2,800 guards runs
/// +5 % / +2 % / 0 / 0 against one function (call and reloads per chunk).
uint32_t chunkSteps(const JITOptions &O) {
  if (O.ChunkSteps >= 0)
    return static_cast<uint32_t>(O.ChunkSteps);
  return O.Level == OptLevel::O1 ? DefaultChunkSteps : 0;
}

/// The function's name inside every relocatable object: each set has its
/// own JITDylib, so identical sets give identical objects.
constexpr const char *CheckName = "gj_check";

/// The first tier's levels lower compact code (LoweringOptions).
bool compactLowering(OptLevel L) {
  return L == OptLevel::O0 || L == OptLevel::Light;
}

} // namespace

/// Binds the address symbols of relocatable code (`gj.a.<k>`) while JITLink
/// links it: the object of a set is linked into the set's own JITDylib, and
/// this plugin turns each such external symbol into an absolute one with the
/// address slot k holds, straight in the link graph. No ORC symbol is
/// defined or looked up per address, so binding costs one relocation per
/// use and the code keeps its 64-bit immediates. All memo slots / read
/// descriptors are one such symbol (TableSlot::Memos), each use with its
/// offset as the relocation's addend, which JITLink applies.
///
/// It binds the runtime helpers and CPython's statics the same way, from
/// the table the engine also defines in its main JITDylib (same names, same
/// addresses): an object whose external symbols are all bound skips ORC's
/// lookup of external symbols (and the dependency tracking that goes with
/// it). A name not in the table (none today) is left to that lookup.
class GuardJIT::AddressBinder : public ObjectLinkingLayer::Plugin {
public:
  /// `Statics`: the helpers' and statics' addresses by (mangled) name.
  explicit AddressBinder(StringMap<ExecutorAddr> Statics)
      : Statics(std::move(Statics)) {}

  /// Registers `Addresses` for what is linked into `JD` until `forget`.
  void bind(JITDylib &JD, ArrayRef<void *> Addresses) {
    std::lock_guard<std::mutex> Lock(M);
    Bindings[&JD] = Addresses;
  }
  void forget(JITDylib &JD) {
    std::lock_guard<std::mutex> Lock(M);
    Bindings.erase(&JD);
  }

  void modifyPassConfig(MaterializationResponsibility &MR, jitlink::LinkGraph &,
                        jitlink::PassConfiguration &Config) override {
    ArrayRef<void *> Addresses;
    {
      std::lock_guard<std::mutex> Lock(M);
      auto It = Bindings.find(&MR.getTargetJITDylib());
      if (It == Bindings.end())
        return;
      Addresses = It->second;
    }
    Config.PostPrunePasses.push_back(
        [this, Addresses](jitlink::LinkGraph &G) -> Error {
          StringRef Prefix = RelocatableAddressPrefix;
          // Collected first: makeAbsolute removes the symbol from the set
          // being iterated.
          SmallVector<std::pair<jitlink::Symbol *, ExecutorAddr>, 0> ToBind;
          for (jitlink::Symbol *Sym : G.external_symbols()) {
            StringRef Name = Sym->getName();
            if (!Name.starts_with(Prefix)) {
              auto S = Statics.find(Name);
              if (S != Statics.end())
                ToBind.push_back({Sym, S->second});
              continue;
            }
            // The slot, in decimal (getAsInteger's radix guessing and
            // overflow checks cost ~10 % of the binding at 1,000 guards).
            StringRef Digits = Name.drop_front(Prefix.size());
            uint64_t Slot = 0;
            bool Ok = !Digits.empty() && Digits.size() <= 9;
            for (char C : Digits) {
              Ok &= C >= '0' && C <= '9';
              Slot = Slot * 10 + uint64_t(C - '0');
            }
            if (!Ok || Slot >= Addresses.size())
              return createStringError("address symbol '%s' has no slot",
                                       Name.str().c_str());
            ToBind.push_back(
                {Sym, ExecutorAddr::fromPtr(Addresses[size_t(Slot)])});
          }
          for (auto &[Sym, Addr] : ToBind)
            G.makeAbsolute(*Sym, Addr);
          return Error::success();
        });
  }
  Error notifyFailed(MaterializationResponsibility &) override {
    return Error::success();
  }
  Error notifyRemovingResources(JITDylib &, ResourceKey) override {
    return Error::success();
  }
  void notifyTransferringResources(JITDylib &, ResourceKey,
                                   ResourceKey) override {}

private:
  /// Read-only after construction.
  const StringMap<ExecutorAddr> Statics;
  std::mutex M;
  DenseMap<JITDylib *, ArrayRef<void *>> Bindings;
};

struct GuardJIT::Lowered {
  std::unique_ptr<LLVMContext> Ctx;
  std::unique_ptr<Module> M;
  std::string Symbol;
  LoweringStats Stats;
  /// Relocatable lowering: the address table's layout.
  std::vector<TableSlot> Table;
};

const char *optLevelName(OptLevel L) {
  switch (L) {
  case OptLevel::O0:
    return "O0";
  case OptLevel::Light:
    return "light";
  case OptLevel::O1:
    return "O1";
  case OptLevel::O2:
    return "O2";
  }
  return "?";
}

CompiledCheck::~CompiledCheck() {
  if (!Dylib)
    return;
  ExecutionSession &ES = Dylib->getExecutionSession();
  if (Error E = ES.removeJITDylib(*Dylib))
    ES.reportError(std::move(E));
}

GuardJIT::GuardJIT(std::unique_ptr<LLJIT> J, JITOptions Opts)
    : J(std::move(J)), Opts(Opts) {}

GuardJIT::~GuardJIT() = default;

Expected<std::unique_ptr<GuardJIT>> GuardJIT::create(JITOptions Opts) {
  // LLVM's target registry is process-wide and shared with any other LLVM
  // user in the process (e.g. another Python extension).
  static std::once_flag InitTargets;
  std::call_once(InitTargets, [] {
    InitializeNativeTarget();
    InitializeNativeTargetAsmPrinter();
  });

  auto JTMB = JITTargetMachineBuilder::detectHost();
  if (!JTMB)
    return JTMB.takeError();
  JTMB->setCodeGenOptLevel(codeGenLevel(Opts.Level));
  // What LLJIT sets on its own copy for JITLink (small code model, PIC:
  // a helper call is a 5-byte call through a JITLink stub); set here too so
  // that TM, hence --emit=asm and the IR passes' TTI, match the JIT's code.
  JTMB->setCodeModel(CodeModel::Small);
  JTMB->setRelocationModel(Reloc::PIC_);
  // FastISel below O2: the selection DAG costs more than it gains on guard
  // code (compare-and-branch chains and calls); O1's gain is the allocator.
  if (Opts.Level != OptLevel::O2)
    JTMB->getOptions().EnableFastISel = true;
  // What JITLink links: position-independent code, small code model (as
  // LLJIT configures its own compiler); the engine compiles with TM itself.
  JTMB->setRelocationModel(Reloc::PIC_);
  JTMB->setCodeModel(CodeModel::Small);

  auto TM = JTMB->createTargetMachine();
  if (!TM)
    return TM.takeError();

  // Guard modules have no constructors, TLS or EH frames to register, so the
  // inactive platform skips the generic platform's per-module IR rewriting.
  auto J = LLJITBuilder()
               .setJITTargetMachineBuilder(*JTMB)
               .setPlatformSetUp(setUpInactivePlatform)
               .create();
  if (!J)
    return J.takeError();

  std::unique_ptr<GuardJIT> Engine(new GuardJIT(std::move(*J), Opts));
  Engine->TM = std::move(*TM);
  auto *Linker = dyn_cast<ObjectLinkingLayer>(&Engine->J->getObjLinkingLayer());
  if (!Linker)
    return createStringError("guardjit needs JITLink (ObjectLinkingLayer)");

  // The library lives inside Python: ORC must never print to stderr.
  GuardJIT *Self = Engine.get();
  Engine->J->getExecutionSession().setErrorReporter(
      [Self](Error E) { Self->reportError(std::move(E)); });

  // The helpers live in this binary, possibly with hidden visibility (the
  // pybind11 module), where dlsym cannot see them: define their addresses.
  SymbolMap Helpers;
  for (const RuntimeSymbol &S : runtimeSymbols())
    Helpers[Engine->J->mangleAndIntern(S.Name)] = {
        ExecutorAddr::fromPtr(S.Address),
        JITSymbolFlags::Exported | JITSymbolFlags::Callable};
  // CPython's statics, which relocatable code names (libpython may be
  // loaded anywhere, and linked statically into a hidden-symbol binary).
  for (const RuntimeSymbol &S : cpythonStatics())
    Helpers[Engine->J->mangleAndIntern(S.Name)] = {
        ExecutorAddr::fromPtr(S.Address), JITSymbolFlags::Exported};
  StringMap<ExecutorAddr> Statics;
  for (auto &[Name, Sym] : Helpers)
    Statics[*Name] = Sym.getAddress();
  if (Error E = Engine->J->getMainJITDylib().define(
          absoluteSymbols(std::move(Helpers))))
    return E;
  auto Binder = std::make_unique<AddressBinder>(std::move(Statics));
  Engine->Binder = Binder.get();
  Linker->addPlugin(std::move(Binder));

  // The chunk size shapes the code: part of the key.
  Engine->Fingerprint = engineFingerprint(
      Engine->TM->getTargetTriple().str(), Engine->TM->getTargetCPU(),
      Engine->TM->getTargetFeatureString(),
      formatv("{0};chunk-steps={1}", levelName(Opts.Level),
              chunkSteps(Opts))
          .str(),
      Opts.HostVersions);
  if (!Opts.CacheDir.empty())
    Engine->Cache = ObjectCache::open(Opts.CacheDir, &Engine->CacheStatus);
  return Engine;
}

GuardJIT::CacheInfo GuardJIT::cacheInfo() const {
  CacheInfo Info;
  Info.Status = CacheStatus;
  if (!Cache)
    return Info;
  Info.Dir = Cache->directory();
  ObjectCacheStats S = Cache->stats();
  Info.Hits = S.Hits;
  Info.Misses = S.Misses;
  Info.Rejected = S.Rejected;
  Info.Stores = S.Stores;
  Info.StoreErrors = S.StoreErrors;
  return Info;
}

void GuardJIT::reportError(Error E) {
  std::string Msg = toString(std::move(E));
  std::lock_guard<std::mutex> Lock(ErrorLock);
  // Bounded: a host that never drains the log must not grow without limit.
  if (ReportedErrors.size() < 64)
    ReportedErrors.push_back(std::move(Msg));
}

std::vector<std::string> GuardJIT::takeReportedErrors() {
  std::lock_guard<std::mutex> Lock(ErrorLock);
  return std::exchange(ReportedErrors, {});
}

void GuardJIT::optimize(Module &M) {
  // O0 runs no IR pass. Light runs early-cse alone: its compact lowering
  // emits no block-per-step scaffold for simplifycfg to remove (that pass
  // cost ~40 % of Light's compile time), but the type/size loads it repeats
  // for each item of one tuple, or each guard on one object, only CSE
  // removes (without it TYPE_MATCH / ID_MATCH on tuple items took 2x the
  // time). Measured: docs/performance.md "Compile latency and the two tiers".
  if (Opts.Level == OptLevel::O0)
    return;
  LoopAnalysisManager LAM;
  FunctionAnalysisManager FAM;
  CGSCCAnalysisManager CGAM;
  ModuleAnalysisManager MAM;
  PassBuilder PB(TM.get());
  PB.registerModuleAnalyses(MAM);
  PB.registerCGSCCAnalyses(CGAM);
  PB.registerFunctionAnalyses(FAM);
  PB.registerLoopAnalyses(LAM);
  PB.crossRegisterProxies(LAM, FAM, CGAM, MAM);

  ModulePassManager MPM;
  if (Opts.Level == OptLevel::O2) {
    MPM = PB.buildPerModuleDefaultPipeline(OptimizationLevel::O2);
  } else if (Opts.Level == OptLevel::Light) {
    FunctionPassManager FPM;
    FPM.addPass(EarlyCSEPass());
    MPM.addPass(createModuleToFunctionPassAdaptor(std::move(FPM)));
  } else {
    // O1: the lowering emits each value once, so there is little
    // to CSE across guards; what these passes remove is the block-per-step
    // scaffold (branch chains, repeated type loads of one object between
    // calls) that O0 codegen would keep. InstCombine was measured and left
    // out: +30-100% compile time for no measurable gain on guard code.
    FunctionPassManager FPM;
    FPM.addPass(EarlyCSEPass());
    FPM.addPass(SimplifyCFGPass());
    MPM.addPass(createModuleToFunctionPassAdaptor(std::move(FPM)));
  }
  MPM.run(M, MAM);
}

Expected<GuardJIT::Lowered> GuardJIT::lower(const BoundGuardSet &Set,
                                            bool KeepNames) {
  return lower(Set.set(), &Set, KeepNames);
}

Expected<GuardJIT::Lowered> GuardJIT::lower(const GuardSet &S,
                                            const BoundGuardSet *Bound,
                                            bool KeepNames) {
  Lowered L;
  L.Ctx = std::make_unique<LLVMContext>();
  // Block and value names are for people reading --emit=llvm; creating them
  // costs about a third of the lowering.
  L.Ctx->setDiscardValueNames(!KeepNames);
  // A compiled object must not depend on the set's name (the cache key
  // leaves it out).
  L.M = std::make_unique<Module>(KeepNames ? S.name() : "guardjit", *L.Ctx);
  L.M->setDataLayout(J->getDataLayout());
  L.M->setTargetTriple(J->getTargetTriple().str());
  L.Symbol = formatv("gj_check_{0}_{1}", sanitize(S.name()),
                     Counter.fetch_add(1, std::memory_order_relaxed));
  // A bound set lowers to what compile() runs: with the object cache,
  // relocatable code (addresses bound at link time, so the object can be
  // reused by another process); without it, the addresses baked in.
  // Relocatable code costs more to compile at O0/Light (FastISel cannot
  // select a load from an absolute symbol and hands whole blocks to the
  // SelectionDAG: about 2x the code generation time on dict-read-heavy
  // sets), which only the cache pays back. Parsed IR lowers to symbolic
  // code (nothing to bind). Emitted text names the function after the set,
  // as the JITDylib is. The first tier's levels emit compact code (calls
  // for the memo tests and the other inline fast paths): lowering + O0 code
  // generation are what a new set waits for, and they scale with the IR.
  // The background tier inlines them (docs/performance.md, "Compile
  // latency").
  LoweringOptions LO;
  LO.Compact = compactLowering(Opts.Level);
  LO.CallMemo = Opts.Level == OptLevel::O0;
  LO.ChunkSteps = chunkSteps(Opts);
  StringRef Name = KeepNames ? StringRef(L.Symbol) : StringRef(CheckName);
  auto F = !Bound  ? lowerGuardSetSymbolic(S, *L.M, L.Symbol, &L.Stats, LO)
           : Cache ? lowerGuardSetRelocatable(S, *L.M, Name, L.Table, &L.Stats,
                                              LO)
                   : lowerGuardSet(*Bound, *L.M, Name, &L.Stats, LO);
  if (!F)
    return F.takeError();
  // Malformed IR would crash instruction selection instead of failing.
  std::string Problems;
  raw_string_ostream OS(Problems);
  if ((Opts.VerifyIR || AlwaysVerify) && verifyModule(*L.M, &OS))
    return createStringError("guardjit internal error: invalid LLVM IR for "
                             "'%s': %s",
                             S.name().c_str(), Problems.c_str());
  return L;
}

Error GuardJIT::link(CompiledCheck &Result, const BoundGuardSet &Set,
                     std::unique_ptr<MemoryBuffer> Object,
                     ArrayRef<TableSlot> Table) {
  // The addresses first: a table that does not fit this set (a foreign
  // cached object) must not reach the JIT.
  SmallVector<void *, 0> Addresses(Table.size());
  for (size_t I = 0; I < Table.size(); ++I) {
    bool InRange = false;
    Addresses[I] =
        const_cast<void *>(tableSlotAddress(Set, Table[I], &InRange));
    if (!InRange)
      return createStringError("address table slot %zu (kind %u, index %u) "
                               "does not fit guard set '%s'",
                               I, unsigned(Table[I].Kind), Table[I].Index,
                               Set.set().name().c_str());
  }

  ExecutionSession &ES = J->getExecutionSession();
  JITDylib &JD = ES.createBareJITDylib(Result.Symbol);
  // Helpers and statics from the main JITDylib, then what LLJIT links every
  // JITDylib against (the process's symbols).
  JITDylibSearchOrder Links;
  Links.push_back({&J->getMainJITDylib(),
                   JITDylibLookupFlags::MatchExportedSymbolsOnly});
  for (auto &Link : J->defaultLinkOrder())
    Links.push_back(Link);
  JD.setLinkOrder(std::move(Links), /*LinkAgainstThisJITDylibFirst=*/true);

  // 4. Link (inside the lookup), binding the address symbols on the way.
  Binder->bind(JD, Addresses);
  auto Fail = [&](Error E) -> Error {
    Binder->forget(JD);
    if (Error R = ES.removeJITDylib(JD))
      reportError(std::move(R));
    return E;
  };
  if (Error E = J->addObjectFile(JD, std::move(Object)))
    return Fail(std::move(E));
  auto Fn = ES.lookup(
      makeJITDylibSearchOrder(&JD, JITDylibLookupFlags::MatchAllSymbols),
      J->mangleAndIntern(CheckName));
  if (!Fn)
    return Fail(Fn.takeError());
  Binder->forget(JD);
  Result.Fn = Fn->getAddress().toPtr<CheckFn>();
  Result.Dylib = &JD;
  return Error::success();
}

Expected<std::unique_ptr<CompiledCheck>>
GuardJIT::compile(const BoundGuardSet &Set) {
  auto Start = Clock::now();
  std::unique_ptr<CompiledCheck> Result(new CompiledCheck());
  Result->Level = Opts.Level;
  Result->Symbol = formatv("gj_check_{0}_{1}", sanitize(Set.set().name()),
                           Counter.fetch_add(1, std::memory_order_relaxed));

  // 0. The object cache: a hit skips lowering, IR passes and codegen.
  ObjectCacheKey Key{};
  if (Cache) {
    Key = Cache->key(Set.set(), Fingerprint + tensorLayoutKey());
    if (std::optional<ObjectCache::Entry> Hit = Cache->lookup(Key)) {
      auto LinkStart = Clock::now();
      Error E = link(*Result, Set, std::move(Hit->Object), Hit->Table);
      if (!E) {
        Result->Stats.LinkMs = msSince(LinkStart);
        Result->Stats.NumGuards = Hit->Stats.NumGuards;
        Result->Stats.NumInlined = Hit->Stats.NumInlined;
        Result->Stats.NumHelpers = Hit->Stats.NumHelpers;
        Result->Stats.CacheHit = true;
        Result->Stats.CacheMs = msSince(Start);
        return Result;
      }
      // A file that passed its checksum but does not link (or fit): not
      // ours after all. Compile as on a miss.
      consumeError(std::move(E));
      Cache->reject(Key);
    }
    Result->Stats.CacheMs = msSince(Start);
  }

  // 1. Lower Guard IR to relocatable LLVM IR in a fresh context.
  Start = Clock::now();
  auto L = lower(Set, /*KeepNames=*/false);
  if (!L)
    return L.takeError();
  Result->Stats.LowerMs = msSince(Start);
  Result->Stats.NumGuards = L->Stats.NumGuards;
  Result->Stats.NumInlined = L->Stats.NumInlined;
  Result->Stats.NumHelpers = L->Stats.NumHelpers;
  for (const Function &F : *L->M) {
    Result->Stats.NumIRInstructions += F.getInstructionCount();
    Result->Stats.NumIRBlocks += F.size();
  }

  // 2.-3. IR passes and code generation to an object. The engine's
  // TargetMachine is shared: one compile at a time per engine.
  Start = Clock::now();
  std::unique_ptr<MemoryBuffer> Object;
  CompileStats &St = Result->Stats;
  {
    std::lock_guard<std::mutex> Lock(CodegenLock);
    auto OptStart = Clock::now();
    optimize(*L->M);
    // Every level but O2 selects instructions with FastISel (create()).
    if (!L->Table.empty() && Opts.Level != OptLevel::O2)
      prepareRelocatableForFastISel(*L->M);
    St.OptimizeMs = msSince(OptStart);
    auto CodegenStart = Clock::now();
    auto Obj = SimpleCompiler(*TM)(*L->M);
    if (!Obj)
      return Obj.takeError();
    Object = std::move(*Obj);
    St.CodegenMs = msSince(CodegenStart);
  }
  // The object's size and its text sections' (the section headers only:
  // microseconds).
  St.ObjectBytes = Object->getBufferSize();
  if (auto File = object::ObjectFile::createObjectFile(
          Object->getMemBufferRef())) {
    for (const object::SectionRef &Sec : (*File)->sections())
      if (Sec.isText())
        St.CodeBytes += Sec.getSize();
  } else {
    consumeError(File.takeError());
  }
  L->M.reset();
  L->Ctx.reset();

  // 4.-5. Link into the set's JITDylib and bind its table. JITLink reads
  // the object only while linking, which ends inside link().
  auto LinkStart = Clock::now();
  if (Error E = link(*Result, Set,
                     MemoryBuffer::getMemBuffer(Object->getMemBufferRef(),
                                                /*RequiresNullTerminator=*/
                                                false),
                     L->Table))
    return E;
  St.LinkMs = msSince(LinkStart);
  Result->Stats.CompileMs = msSince(Start);

  // 6. Store for the next process (a failure only costs the next one).
  if (Cache) {
    auto StoreStart = Clock::now();
    if (Error E = Cache->store(Key, L->Table, L->Stats, Object->getBuffer()))
      reportError(std::move(E));
    Result->Stats.CacheMs += msSince(StoreStart);
  }
  return Result;
}

Expected<CheckFn> GuardJIT::lookup(StringRef Symbol) {
  JITDylib *JD = J->getExecutionSession().getJITDylibByName(Symbol);
  if (!JD)
    return createStringError("Symbols not found: [ %s ]",
                             Symbol.str().c_str());
  auto Addr = J->lookup(*JD, CheckName);
  if (!Addr)
    return Addr.takeError();
  return Addr->toPtr<CheckFn>();
}

Expected<std::string> GuardJIT::emitLLVM(const BoundGuardSet &Set) {
  auto L = lower(Set, /*KeepNames=*/true);
  if (!L)
    return L.takeError();
  return printLowered(*L);
}

Expected<std::string> GuardJIT::emitLLVM(const GuardSet &Set) {
  auto L = lower(Set, nullptr, /*KeepNames=*/true);
  if (!L)
    return L.takeError();
  return printLowered(*L);
}

std::string GuardJIT::printLowered(Lowered &L) {
  {
    std::lock_guard<std::mutex> Lock(CodegenLock);
    optimize(*L.M);
  }
  std::string Out;
  raw_string_ostream OS(Out);
  L.M->print(OS, nullptr);
  return Out;
}

Expected<std::string> GuardJIT::emitAssembly(const BoundGuardSet &Set) {
  auto L = lower(Set, /*KeepNames=*/true);
  if (!L)
    return L.takeError();
  return assembleLowered(*L);
}

Expected<std::string> GuardJIT::emitAssembly(const GuardSet &Set) {
  auto L = lower(Set, nullptr, /*KeepNames=*/true);
  if (!L)
    return L.takeError();
  return assembleLowered(*L);
}

Expected<std::string> GuardJIT::assembleLowered(Lowered &L) {
  SmallString<0> Asm;
  raw_svector_ostream OS(Asm);
  std::lock_guard<std::mutex> Lock(CodegenLock);
  optimize(*L.M);
  legacy::PassManager PM;
  if (TM->addPassesToEmitFile(PM, OS, nullptr, CodeGenFileType::AssemblyFile))
    return createStringError("the host target cannot emit assembly");
  PM.run(*L.M);
  return std::string(Asm.str());
}

} // namespace guardjit

//===- Engine.cpp - ORC LLJIT engine for guard sets -----------------------===//
//
// One LLJIT per engine; one LLVMContext + module + ResourceTracker per guard
// set, so a set's code can be freed independently of every other set. The
// only TU of guardjit that includes LLJIT.h (about 10 s to compile).
//
//===----------------------------------------------------------------------===//
#include "guardjit/JIT/Engine.h"

#include "guardjit/JIT/Lowering.h"

#include "llvm/ExecutionEngine/Orc/Core.h"
#include "llvm/ExecutionEngine/Orc/IRTransformLayer.h"
#include "llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h"
#include "llvm/ExecutionEngine/Orc/LLJIT.h"
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

bool compactLowering(OptLevel L) {
  return L == OptLevel::O0 || L == OptLevel::Light;
}

} // namespace

/// Timestamps and sizes the ORC layers record for the compile in progress.
struct GuardJIT::PhaseClock {
  Clock::time_point OptimizeStart, OptimizeEnd, CodegenEnd;
  size_t CodeBytes = 0, ObjectBytes = 0;
};

struct GuardJIT::Lowered {
  std::unique_ptr<LLVMContext> Ctx;
  std::unique_ptr<Module> M;
  std::string Symbol;
  LoweringStats Stats;
};

CompiledCheck::~CompiledCheck() {
  if (!Tracker)
    return;
  ExecutionSession &ES = Tracker->getJITDylib().getExecutionSession();
  if (Error E = Tracker->remove())
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
  if (Error E = Engine->J->getMainJITDylib().define(
          absoluteSymbols(std::move(Helpers))))
    return E;

  // Both transforms run inside lookup(), i.e. under CodegenLock (see
  // compile()), on the compiling thread; besides optimizing they time the
  // phases and measure the object (CompileStats).
  Engine->J->getIRTransformLayer().setTransform(
      [Self](ThreadSafeModule TSM, MaterializationResponsibility &)
          -> Expected<ThreadSafeModule> {
        if (Self->Phases)
          Self->Phases->OptimizeStart = Clock::now();
        TSM.withModuleDo([Self](Module &M) { Self->optimize(M); });
        if (Self->Phases)
          Self->Phases->OptimizeEnd = Clock::now();
        return TSM;
      });
  Engine->J->getObjTransformLayer().setTransform(
      [Self](std::unique_ptr<MemoryBuffer> Obj)
          -> Expected<std::unique_ptr<MemoryBuffer>> {
        if (PhaseClock *P = Self->Phases) {
          P->CodegenEnd = Clock::now();
          P->ObjectBytes += Obj->getBufferSize();
          // Reads the section headers only (microseconds).
          auto File =
              object::ObjectFile::createObjectFile(Obj->getMemBufferRef());
          if (!File) {
            consumeError(File.takeError());
          } else {
            for (const object::SectionRef &Sec : (*File)->sections())
              if (Sec.isText())
                P->CodeBytes += Sec.getSize();
          }
        }
        return Obj;
      });
  return Engine;
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
  // time). Measured: issue 15, docs/performance.md "Compile latency".
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
  L.M = std::make_unique<Module>(S.name(), *L.Ctx);
  L.M->setDataLayout(J->getDataLayout());
  L.M->setTargetTriple(J->getTargetTriple().str());
  L.Symbol = formatv("gj_check_{0}_{1}", sanitize(S.name()),
                     Counter.fetch_add(1, std::memory_order_relaxed));
  // The first tier's levels emit compact code (calls for the memo tests
  // and the other inline fast paths): lowering + O0 code generation are
  // what a new set waits for, and they scale with the IR. The background
  // tier inlines them (docs/performance.md, "Compile latency").
  LoweringOptions LO;
  LO.Compact = compactLowering(Opts.Level);
  LO.CallMemo = Opts.Level == OptLevel::O0;
  auto F = Bound ? lowerGuardSet(*Bound, *L.M, L.Symbol, &L.Stats, LO)
               : lowerGuardSetSymbolic(S, *L.M, L.Symbol, &L.Stats, LO);
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

Expected<std::unique_ptr<CompiledCheck>>
GuardJIT::compile(const BoundGuardSet &Set) {
  // 1. Lower Guard IR to LLVM IR in a fresh context.
  auto Start = Clock::now();
  auto L = lower(Set, /*KeepNames=*/false);
  if (!L)
    return L.takeError();
  std::unique_ptr<CompiledCheck> Result(new CompiledCheck());
  Result->Stats.LowerMs = msSince(Start);
  Result->Stats.NumGuards = L->Stats.NumGuards;
  Result->Stats.NumInlined = L->Stats.NumInlined;
  Result->Stats.NumHelpers = L->Stats.NumHelpers;
  for (const Function &F : *L->M) {
    Result->Stats.NumIRInstructions += F.getInstructionCount();
    Result->Stats.NumIRBlocks += F.size();
  }
  Result->Symbol = L->Symbol;
  Result->Level = Opts.Level;

  // 2. Add the module under its own tracker; optimize, codegen and link run
  // on this thread inside lookup(). LLJIT's default compiler shares one
  // TargetMachine, hence one compile at a time per engine.
  Start = Clock::now();
  ResourceTrackerSP RT = J->getMainJITDylib().createResourceTracker();
  std::lock_guard<std::mutex> Lock(CodegenLock);
  PhaseClock Clocks;
  Clocks.OptimizeStart = Clocks.OptimizeEnd = Clocks.CodegenEnd = Start;
  Phases = &Clocks;
  if (Error E = J->addIRModule(
          RT, ThreadSafeModule(std::move(L->M), std::move(L->Ctx)))) {
    Phases = nullptr;
    return E;
  }
  auto Addr = J->lookup(Result->Symbol);
  Phases = nullptr;
  if (!Addr) {
    if (Error E = RT->remove())
      reportError(std::move(E));
    return Addr.takeError();
  }
  auto End = Clock::now();
  auto Ms = [](Clock::time_point A, Clock::time_point B) {
    return std::chrono::duration<double, std::milli>(B - A).count();
  };
  CompileStats &St = Result->Stats;
  St.CompileMs = Ms(Start, End);
  St.OptimizeMs = Ms(Clocks.OptimizeStart, Clocks.OptimizeEnd);
  St.CodegenMs = Ms(Clocks.OptimizeEnd, Clocks.CodegenEnd);
  St.LinkMs = St.CompileMs - St.OptimizeMs - St.CodegenMs;
  St.CodeBytes = Clocks.CodeBytes;
  St.ObjectBytes = Clocks.ObjectBytes;
  Result->Fn = Addr->toPtr<CheckFn>();
  Result->Tracker = std::move(RT);
  return Result;
}

Expected<CheckFn> GuardJIT::lookup(StringRef Symbol) {
  auto Addr = J->lookup(Symbol);
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

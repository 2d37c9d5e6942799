//===- GuardIROptDriver.cpp - The guard-ir-opt driver ---------------------===//
//
// Steps per input chunk: (1) parse (or import a TORCH_LOGS=guards log),
// (2) verify, (3) run the pass pipeline, (4) statistics, (5) emit.
// `--split-input-file` and `--verify-diagnostics` behave as in mlir-opt, so
// negative tests read the same way in both projects.
//
//===----------------------------------------------------------------------===//
#include "guardjit/Tools/GuardIROptDriver.h"

#include "guardjit/IR/Parser.h"
#include "guardjit/Import/TorchLogImporter.h"
#include "guardjit/IR/Printer.h"
#include "guardjit/IR/Verifier.h"
#include "guardjit/JIT/Engine.h"
#include "guardjit/Transforms/PassPipeline.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Regex.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/ADT/Statistic.h"
#include "llvm/IR/PrintPasses.h"
#include "llvm/Pass.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/WithColor.h"
#include "llvm/Support/raw_ostream.h"

#include <memory>
#include <string>
#include <vector>

using namespace llvm;
using namespace guardjit;

// libLLVM defines these (opt's flags); guard-ir-opt gives them its meaning
// rather than registering a second copy, which would abort.
namespace llvm {
extern cl::opt<bool> PrintPipelinePasses; // --print-pipeline-passes
} // namespace llvm

namespace {

enum class EmitKind { IR, LLVM, Asm };
enum class InputKind { Gir, TorchLogs };

cl::OptionCategory ToolCategory("guard-ir-opt options");

cl::opt<std::string> InputFilename(cl::Positional,
                                   cl::desc("<input .gir file, - for stdin>"),
                                   cl::init("-"), cl::cat(ToolCategory));

cl::opt<std::string> OutputFilename("o", cl::desc("Output file (- for stdout)"),
                                    cl::value_desc("filename"), cl::init("-"),
                                    cl::cat(ToolCategory));

cl::opt<InputKind> Import(
    "import", cl::desc("What the input is"), cl::init(InputKind::Gir),
    cl::values(clEnumValN(InputKind::Gir, "gir", ".gir text, the default"),
               clEnumValN(InputKind::TorchLogs, "torch-logs",
                          "a TORCH_LOGS=guards log: one guard set per "
                          "TREE_GUARD_MANAGER dump, named after its frame id")),
    cl::cat(ToolCategory));

cl::opt<bool> SplitInputFile(
    "split-input-file",
    cl::desc("Process each chunk between '// -----' lines separately and "
             "join the outputs with '// -----'"),
    cl::cat(ToolCategory));

cl::opt<bool> VerifyDiagnostics(
    "verify-diagnostics",
    cl::desc("Check that the errors reported are exactly those the input "
             "expects with '// expected-error[@+N|@-N] {{message}}' "
             "(and expected-warning)"),
    cl::cat(ToolCategory));

cl::opt<EmitKind> Emit(
    "emit", cl::desc("What to write"), cl::init(EmitKind::IR),
    cl::values(clEnumValN(EmitKind::IR, "ir", "Guard IR (.gir), the default"),
               clEnumValN(EmitKind::LLVM, "llvm",
                          "LLVM IR of each set's check function, objects as "
                          "external symbols @gj.obj.N"),
               clEnumValN(EmitKind::Asm, "asm",
                          "host assembly of each set's check function")),
    cl::cat(ToolCategory));

cl::opt<OptLevel> JITLevel(
    "opt-level", cl::desc("Code level for --emit=llvm|asm"),
    cl::init(OptLevel::Light),
    cl::values(clEnumValN(OptLevel::O0, "O0", "IR as lowered, fast isel"),
               clEnumValN(OptLevel::Light, "light",
                          "early-cse + simplifycfg (the default)"),
               clEnumValN(OptLevel::O1, "O1",
                          "light's IR passes, greedy register allocation "
                          "(the background tier)"),
               clEnumValN(OptLevel::O2, "O2", "the O2 pipeline")),
    cl::cat(ToolCategory));

cl::opt<std::string> PassPipelineText(
    "passes",
    cl::desc("Pass pipeline to run, e.g. -passes=cse,dedup or "
             "-passes=default (see --print-passes)"),
    cl::value_desc("pipeline"), cl::cat(ToolCategory));

cl::opt<bool> PrintPassNames("print-passes",
                             cl::desc("Print the available passes and exit"),
                             cl::cat(ToolCategory));

/// A line starting with this (after blanks) separates chunks.
constexpr StringLiteral SplitMarker = "// -----";

/// Splits `Buf` at split-marker lines. Each chunk is prefixed with the line
/// ends before it, so that its line numbers are those of the whole file.
std::vector<std::unique_ptr<MemoryBuffer>> splitInput(const MemoryBuffer &Buf) {
  std::vector<std::unique_ptr<MemoryBuffer>> Chunks;
  StringRef Text = Buf.getBuffer();
  size_t ChunkStart = 0, LineStart = 0, LinesBefore = 0, ChunkLines = 0;
  auto Flush = [&](size_t End) {
    std::string Chunk(LinesBefore, '\n');
    Chunk += Text.slice(ChunkStart, End);
    Chunks.push_back(
        MemoryBuffer::getMemBufferCopy(Chunk, Buf.getBufferIdentifier()));
  };
  while (LineStart < Text.size()) {
    size_t LineEnd = Text.find('\n', LineStart);
    size_t Next = LineEnd == StringRef::npos ? Text.size() : LineEnd + 1;
    StringRef Line = Text.slice(LineStart, Next);
    if (Line.ltrim(" \t").starts_with(SplitMarker)) {
      Flush(LineStart);
      LinesBefore += ChunkLines + 1;
      ChunkLines = 0;
      ChunkStart = Next;
    } else if (LineEnd != StringRef::npos) {
      ++ChunkLines;
    }
    LineStart = Next;
  }
  Flush(Text.size());
  return Chunks;
}

/// Matches reported errors against `expected-error` comments of one buffer,
/// as mlir's SourceMgrDiagnosticVerifierHandler does.
class DiagnosticVerifier {
public:
  DiagnosticVerifier(SourceMgr &SM, unsigned BufferId) : SM(SM) {
    collectExpectations(SM.getMemoryBuffer(BufferId)->getBuffer());
    SM.setDiagHandler(
        [](const SMDiagnostic &D, void *Self) {
          static_cast<DiagnosticVerifier *>(Self)->handle(D);
        },
        this);
  }

  /// Reports every mismatch to stderr; true when there was none.
  bool finish() {
    SM.setDiagHandler(nullptr);
    bool Ok = Malformed.empty() && Unexpected.empty();
    for (const SMDiagnostic &D : Malformed)
      SM.PrintMessage(errs(), D);
    for (const SMDiagnostic &D : Unexpected)
      SM.PrintMessage(errs(), D.getLoc(), SourceMgr::DK_Error,
                      Twine("unexpected ") + kindName(D.getKind()) + ": " +
                          D.getMessage());
    for (const Expectation &E : Expected) {
      if (E.Seen)
        continue;
      Ok = false;
      SM.PrintMessage(errs(), E.Loc, SourceMgr::DK_Error,
                      Twine("expected ") + kindName(E.Kind) + " \"" +
                          E.Message + "\" was not produced");
    }
    return Ok;
  }

private:
  struct Expectation {
    SourceMgr::DiagKind Kind;
    unsigned Line;
    std::string Message;
    SMLoc Loc;
    bool Seen = false;
  };

  static StringRef kindName(SourceMgr::DiagKind K) {
    return K == SourceMgr::DK_Warning ? "warning"
           : K == SourceMgr::DK_Error ? "error"
                                      : "note";
  }

  void collectExpectations(StringRef Text) {
    Regex Directive("expected-(error|warning) *(@([+-][0-9]+|above|below))? "
                    "*\\{\\{(.*)\\}\\}");
    Regex CommentStart("//[ \t]*expected-(error|warning)");
    unsigned LineNo = 0;
    for (StringRef Rest = Text; !Rest.empty();) {
      auto [Line, Tail] = Rest.split('\n');
      Rest = Tail;
      ++LineNo;
      // Only a comment that starts with the directive is one, so that text
      // merely mentioning it (a CHECK line) is not.
      SmallVector<StringRef, 1> Start;
      if (!CommentStart.match(Line, &Start))
        continue;
      size_t At = Start[0].end() - Line.begin() - strlen("expected-") -
                  Start[1].size();
      SMLoc Loc = SMLoc::getFromPointer(Line.data() + At);
      SmallVector<StringRef, 5> M;
      if (!Directive.match(Line.drop_front(At), &M)) {
        Malformed.push_back(SM.GetMessage(
            Loc, SourceMgr::DK_Error,
            "malformed expected-" + Start[1] + ", expected {{message}}"));
        continue;
      }
      SourceMgr::DiagKind Kind =
          M[1] == "warning" ? SourceMgr::DK_Warning : SourceMgr::DK_Error;
      int64_t Target = LineNo;
      StringRef Offset = M[3];
      if (Offset == "above")
        Target -= 1;
      else if (Offset == "below")
        Target += 1;
      else if (!Offset.empty()) {
        int64_t Delta = 0;
        if (Offset.drop_front(Offset[0] == '+').getAsInteger(10, Delta) ||
            Target + Delta < 1 || Delta > INT32_MAX) {
          Malformed.push_back(SM.GetMessage(
              Loc, SourceMgr::DK_Error,
              "expected-" + M[1] + " refers to a line outside the file"));
          continue;
        }
        Target += Delta;
      }
      Expected.push_back({Kind, static_cast<unsigned>(Target), M[4].str(), Loc});
    }
  }

  void handle(const SMDiagnostic &D) {
    for (Expectation &E : Expected)
      if (!E.Seen && E.Kind == D.getKind() &&
          E.Line == static_cast<unsigned>(D.getLineNo()) &&
          D.getMessage().contains(E.Message)) {
        E.Seen = true;
        return;
      }
    Unexpected.push_back(D);
  }

  SourceMgr &SM;
  std::vector<Expectation> Expected;
  std::vector<SMDiagnostic> Malformed, Unexpected;
};

void printStats(const GuardSet &S, raw_ostream &OS) {
  OS << "guard set " << quoteString(S.name()) << ": " << S.guards().size()
     << " guards, " << S.values().size() << " values, " << S.objects().size()
     << " objects, " << S.tensorSpecs().size() << " tensor specs\n";
  std::vector<size_t> Counts = S.countByKind();
  for (size_t K = 0; K < Counts.size(); ++K)
    if (Counts[K])
      OS << format("  %6zu ", Counts[K]) << spelling(static_cast<GuardKind>(K))
         << '\n';
}

/// Removed guards per kind of one pass, as "2 type_match, 1 none_match".
std::string removedByKind(const PassRunStats &R) {
  std::string Out;
  raw_string_ostream OS(Out);
  ListSeparator LS(", ");
  for (size_t K = 0; K < R.GuardsRemoved.size(); ++K)
    if (R.GuardsRemoved[K])
      OS << LS << R.GuardsRemoved[K] << ' '
         << spelling(static_cast<GuardKind>(K));
  return Out;
}

void printPassStats(const std::vector<PassRunStats> &Runs, raw_ostream &OS) {
  for (const PassRunStats &R : Runs) {
    int64_t Guards = 0;
    for (int64_t N : R.GuardsRemoved)
      Guards += N;
    OS << "  pass " << R.Pass << ": removed " << Guards << " guards";
    if (Guards)
      OS << " (" << removedByKind(R) << ")";
    OS << ", " << R.ValuesRemoved << " values";
    // A multi-set pass's own counts: how each pair of units was told apart.
    for (size_t I = 0; I < R.Counters.size(); ++I)
      OS << (I ? ", " : "; ") << R.Counters[I].first << ' '
         << R.Counters[I].second;
    OS << '\n';
  }
}

/// Wall time per pass summed over every set, as --time-passes prints it.
class PassTimes {
public:
  void add(const std::vector<PassRunStats> &Runs) {
    for (const PassRunStats &R : Runs) {
      auto It = find_if(Rows, [&](const Row &X) { return X.Pass == R.Pass; });
      if (It == Rows.end())
        It = Rows.insert(Rows.end(), Row{R.Pass, 0, 0});
      It->Micros += R.Micros;
      ++It->Runs;
    }
  }
  bool empty() const { return Rows.empty(); }
  void print(raw_ostream &OS) const {
    double Total = 0;
    for (const Row &R : Rows)
      Total += R.Micros;
    OS << "===" << std::string(70, '-') << "===\n"
       << "                      Guard IR pass execution timing report\n"
       << "===" << std::string(70, '-') << "===\n"
       << format("  Total wall time: %.1f us\n\n", Total)
       << "   wall us    %   runs  pass\n";
    for (const Row &R : Rows)
      OS << format("%10.1f %5.1f %6u  ", R.Micros,
                   Total > 0 ? 100.0 * R.Micros / Total : 0.0, R.Runs)
         << R.Pass << '\n';
    OS << format("%10.1f 100.0         total\n", Total);
  }

private:
  struct Row {
    std::string Pass;
    double Micros;
    unsigned Runs;
  };
  std::vector<Row> Rows;
};

PipelineInstrumentation instrumentation() {
  PipelineInstrumentation Instr;
  if (shouldPrintAfterAll())
    Instr.AfterPass = [](StringRef Pass, const GuardSet &S) {
      errs() << "// *** IR Dump After " << Pass << " ***\n"
             << printGuardSet(S);
    };
  return Instr;
}

class Driver {
public:
  explicit Driver(const PassPipeline &Pipeline) : Pipeline(Pipeline) {}
  const PassTimes &times() const { return Times; }

  /// Steps 1-4 for one chunk; writes its output to `OS`. Returns success, or
  /// with --verify-diagnostics whether the errors were the expected ones.
  bool processChunk(std::unique_ptr<MemoryBuffer> Buf, raw_ostream &OS);

private:
  bool emit(const ParsedGuardSet &P, SourceMgr &SM, raw_ostream &OS);
  bool runPipeline(ParsedGuardSet &P, SourceMgr &SM);
  bool runCodeObject(const ParsedCodeObject &C,
                     std::vector<ParsedGuardSet> &Sets, SourceMgr &SM);
  const PassPipeline &Pipeline;
  PassTimes Times;
  std::unique_ptr<GuardJIT> JIT;
};

bool Driver::runPipeline(ParsedGuardSet &P, SourceMgr &SM) {
  std::vector<PassRunStats> Runs;
  // Parsed IR has no live objects: the passes use what the IR proves.
  if (Error E = Pipeline.run(P.Set, PassContext(), &Runs, instrumentation())) {
    SM.PrintMessage(P.Locs.Set, SourceMgr::DK_Error, toString(std::move(E)));
    return false;
  }
  if (AreStatisticsEnabled())
    printPassStats(Runs, errs());
  Times.add(Runs);
  return true;
}

bool Driver::runCodeObject(const ParsedCodeObject &C,
                           std::vector<ParsedGuardSet> &Sets, SourceMgr &SM) {
  bool Stats = AreStatisticsEnabled();
  if (Stats)
    errs() << "code object " << quoteString(C.Name) << ": " << C.Units.size()
           << " units\n";
  std::vector<std::optional<GuardSet>> Units;
  for (size_t U = 0; U < C.Units.size(); ++U) {
    if (C.Units[U] == InvalidId) {
      if (Stats)
        errs() << "opaque unit " << U << '\n';
      Units.push_back(std::nullopt);
      continue;
    }
    GuardSet &S = Sets[C.Units[U]].Set;
    if (Stats)
      printStats(S, errs());
    Units.push_back(std::move(S));
  }
  if (Pipeline.empty()) {
    for (size_t U = 0; U < C.Units.size(); ++U)
      if (Units[U])
        Sets[C.Units[U]].Set = std::move(*Units[U]);
    return true;
  }
  std::vector<std::vector<PassRunStats>> Runs;
  // Parsed IR has no live objects: the passes use what the IR proves.
  Error E = Pipeline.runUnits(Units, PassContext(), &Runs, instrumentation());
  for (size_t U = 0; U < C.Units.size(); ++U)
    if (Units[U])
      Sets[C.Units[U]].Set = std::move(*Units[U]);
  if (E) {
    SM.PrintMessage(C.Loc, SourceMgr::DK_Error, toString(std::move(E)));
    return false;
  }
  for (size_t U = 0; U < C.Units.size(); ++U) {
    if (C.Units[U] == InvalidId)
      continue;
    Times.add(Runs[U]);
    if (!Stats)
      continue;
    errs() << "unit " << quoteString(Sets[C.Units[U]].Set.name()) << ":\n";
    printPassStats(Runs[U], errs());
    errs() << "after passes: ";
    printStats(Sets[C.Units[U]].Set, errs());
  }
  return true;
}

/// The .gir text of the chunk: lone sets and code objects in file order.
std::string printChunk(const std::vector<ParsedGuardSet> &Sets,
                       const std::vector<ParsedCodeObject> &CodeObjects) {
  std::string Out;
  bool First = true;
  auto Item = [&](const std::string &Text) {
    if (!First)
      Out += '\n';
    First = false;
    Out += Text;
  };
  size_t Next = 0;
  auto LoneUpTo = [&](size_t End) {
    for (; Next < End; ++Next)
      if (Sets[Next].CodeObject == InvalidId)
        Item(printGuardSet(Sets[Next].Set));
  };
  for (const ParsedCodeObject &C : CodeObjects) {
    LoneUpTo(C.SetsBefore);
    std::vector<const GuardSet *> Units;
    for (uint32_t U : C.Units)
      Units.push_back(U == InvalidId ? nullptr : &Sets[U].Set);
    Item(printCodeObject(C.Name, Units));
  }
  LoneUpTo(Sets.size());
  return Out;
}

bool Driver::processChunk(std::unique_ptr<MemoryBuffer> Buf, raw_ostream &OS) {
  SourceMgr SM;
  unsigned Id = SM.AddNewSourceBuffer(std::move(Buf), SMLoc());
  std::unique_ptr<DiagnosticVerifier> Verifier;
  if (VerifyDiagnostics)
    Verifier = std::make_unique<DiagnosticVerifier>(SM, Id);

  // 1. Parse or import; 2. verify every set (all of their problems, not the
  // first).
  bool Ok = false;
  std::vector<ParsedCodeObject> CodeObjects;
  std::optional<ParsedGirHeader> Header;
  std::optional<std::vector<ParsedGuardSet>> Sets =
      Import == InputKind::TorchLogs ? importTorchLog(SM, Id)
                                     : parseGir(SM, Id, &CodeObjects, &Header);
  if (Sets) {
    Ok = true;
    for (const ParsedGuardSet &P : *Sets)
      Ok &= verifyGuardSet(P.Set, P.Locs, SM);
  }
  // 3. Pass pipeline (with the statistics of what goes in and out);
  // 4. emit.
  if (Ok) {
    for (ParsedGuardSet &P : *Sets) {
      if (P.CodeObject != InvalidId)
        continue; // below, with the other units of its code object
      if (AreStatisticsEnabled())
        printStats(P.Set, errs());
      if (Pipeline.hasMultiSetPass()) {
        SM.PrintMessage(P.Locs.Set, SourceMgr::DK_Error,
                        "pass '" + Pipeline.firstMultiSetPass() +
                            "' runs over the units of a code object: put "
                            "this guard set in a code_object block");
        Ok = false;
        continue;
      }
      if (!Pipeline.empty()) {
        if (!runPipeline(P, SM)) {
          Ok = false;
          continue;
        }
        if (AreStatisticsEnabled()) {
          errs() << "after passes: ";
          printStats(P.Set, errs());
        }
      }
    }
    for (const ParsedCodeObject &C : CodeObjects)
      Ok &= runCodeObject(C, *Sets, SM);
    if (Ok && Emit != EmitKind::IR)
      for (const ParsedGuardSet &P : *Sets)
        Ok &= emit(P, SM, OS);
    if (Ok && Emit == EmitKind::IR) {
      // The version header is carried through as it was read.
      if (Header)
        OS << printGirHeader(Header->Versions) << (Sets->empty() ? "" : "\n");
      OS << printChunk(*Sets, CodeObjects);
    }
  }
  return Verifier ? Verifier->finish() : Ok;
}

bool Driver::emit(const ParsedGuardSet &P, SourceMgr &SM, raw_ostream &OS) {
  if (!JIT) {
    JITOptions Opts;
    Opts.Level = JITLevel;
    Opts.VerifyIR = true;
    auto J = GuardJIT::create(Opts);
    if (!J) {
      WithColor::error(errs(), "guard-ir-opt") << toString(J.takeError())
                                               << '\n';
      return false;
    }
    JIT = std::move(*J);
  }
  Expected<std::string> Text = Emit == EmitKind::LLVM
                                   ? JIT->emitLLVM(P.Set)
                                   : JIT->emitAssembly(P.Set);
  if (!Text) {
    SM.PrintMessage(P.Locs.Set, SourceMgr::DK_Error,
                    "cannot lower guard set: " + toString(Text.takeError()));
    return false;
  }
  OS << *Text;
  return true;
}

} // namespace

int guardjit::guardIROptMain(int Argc, char **Argv) {
  InitLLVM X(Argc, Argv);
  cl::HideUnrelatedOptions(ToolCategory);
  // `--stats` is LLVM's own -stats flag (libLLVM registers it; a second one
  // would abort): it turns on our per-kind counts, and LLVM's statistics in
  // builds of LLVM that collect them. Registered lazily, so looked up after
  // HideUnrelatedOptions has made LLVM register its common options.
  if (cl::Option *Stats = cl::getRegisteredOptions().lookup("stats")) {
    Stats->setDescription("Print guards per kind of each set to stderr");
    Stats->addCategory(ToolCategory);
    Stats->setHiddenFlag(cl::NotHidden);
  }
  // LLVM's own pass-manager flags, given guard-ir-opt's meaning (see above).
  for (StringRef Name : {"time-passes", "print-after-all",
                         "print-pipeline-passes"})
    if (cl::Option *O = cl::getRegisteredOptions().lookup(Name)) {
      O->addCategory(ToolCategory);
      O->setHiddenFlag(cl::NotHidden);
    }
  cl::ParseCommandLineOptions(
      Argc, Argv,
      "guard-ir-opt: reads Guard IR (.gir, or a TORCH_LOGS=guards log with "
      "--import=torch-logs), verifies it and writes it back as .gir, LLVM IR "
      "or assembly\n");

  if (PrintPassNames) {
    printPassNames(outs());
    return 0;
  }
  Expected<PassPipeline> Pipeline = PassPipeline::parse(PassPipelineText);
  if (!Pipeline) {
    // Point at the column in the pipeline text, as the parser does in .gir.
    SourceMgr PipelineSM;
    PipelineSM.AddNewSourceBuffer(
        MemoryBuffer::getMemBufferCopy(PassPipelineText, "-passes"), SMLoc());
    handleAllErrors(Pipeline.takeError(), [&](const PipelineError &E) {
      PipelineSM.PrintMessage(
          errs(),
          SMLoc::getFromPointer(
              PipelineSM.getMemoryBuffer(1)->getBufferStart() + E.column()),
          SourceMgr::DK_Error, E.text());
    });
    return 1;
  }
  if (PrintPipelinePasses) {
    outs() << Pipeline->str() << '\n';
    return 0;
  }

  ErrorOr<std::unique_ptr<MemoryBuffer>> Input =
      MemoryBuffer::getFileOrSTDIN(InputFilename, /*IsText=*/true);
  if (std::error_code EC = Input.getError()) {
    WithColor::error(errs(), "guard-ir-opt")
        << "cannot read '" << InputFilename << "': " << EC.message() << '\n';
    return 1;
  }
  std::error_code EC;
  ToolOutputFile Out(OutputFilename, EC, sys::fs::OF_None);
  if (EC) {
    WithColor::error(errs(), "guard-ir-opt")
        << "cannot open '" << OutputFilename << "': " << EC.message() << '\n';
    return 1;
  }

  Driver D(*Pipeline);
  bool Ok = true;
  if (!SplitInputFile) {
    Ok = D.processChunk(std::move(*Input), Out.os());
  } else {
    std::vector<std::unique_ptr<MemoryBuffer>> Chunks = splitInput(**Input);
    for (size_t I = 0; I < Chunks.size(); ++I) {
      if (I)
        Out.os() << SplitMarker << '\n';
      // Every chunk runs, so one test file reports all of its failures.
      Ok &= D.processChunk(std::move(Chunks[I]), Out.os());
    }
  }
  if (TimePassesIsEnabled && !D.times().empty())
    D.times().print(errs());
  if (!Ok)
    return 1;
  Out.keep();
  return 0;
}

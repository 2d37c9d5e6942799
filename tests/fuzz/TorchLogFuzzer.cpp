//===- TorchLogFuzzer.cpp - libFuzzer target: the TORCH_LOGS importer -----===//
//
// Any input: importing must return (an error or guard sets), never crash or
// hang. Whatever imports must verify (the importer promises IR the verifier
// accepts, opaque constructs included) and round-trip through the .gir
// printer and parser. A violation aborts, which libFuzzer reports as a crash.
//
//===----------------------------------------------------------------------===//
#include "FuzzerSupport.h"

#include "guardjit/IR/Parser.h"
#include "guardjit/IR/Printer.h"
#include "guardjit/IR/Verifier.h"
#include "guardjit/Import/TorchLogImporter.h"

#include "llvm/Support/Error.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"

#include <cstdint>

using namespace guardjit;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *Data, size_t Size) {
  llvm::StringRef Input(reinterpret_cast<const char *>(Data), Size);
  llvm::SourceMgr SM;
  SM.setDiagHandler(fuzz::discardDiagnostic);
  unsigned Id = SM.AddNewSourceBuffer(
      llvm::MemoryBuffer::getMemBufferCopy(Input, "fuzz.log"), llvm::SMLoc());
  std::optional<std::vector<ParsedGuardSet>> Sets = importTorchLog(SM, Id);
  if (!Sets)
    return 0;
  std::vector<GuardSet> Plain;
  for (ParsedGuardSet &P : *Sets) {
    if (llvm::Error E = verifyGuardSet(P.Set))
      fuzz::fail("imported set does not verify", llvm::toString(std::move(E)),
                 printGuardSet(P.Set));
    Plain.push_back(std::move(P.Set));
  }
  std::string Text = printGuardSets(Plain);
  llvm::Expected<std::vector<GuardSet>> Again = parseGirString(Text, "printed");
  if (!Again)
    fuzz::fail("printed import does not parse", llvm::toString(Again.takeError()),
               Text);
  if (printGuardSets(*Again) != Text)
    fuzz::fail("print(parse(print(import))) != print(import)", Text,
               printGuardSets(*Again));
  return 0;
}

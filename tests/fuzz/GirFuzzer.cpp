//===- GirFuzzer.cpp - libFuzzer target: .gir parser, verifier, printer ---===//
//
// Any input: parsing and verifying must return (an error or IR), never crash
// or hang. Whatever parses and verifies must print, and the printed text must
// parse, verify and print to the same text (docs/gir-format.md: text is the
// golden format). A violation aborts, which libFuzzer reports as a crash.
//
//===----------------------------------------------------------------------===//
#include "FuzzerSupport.h"

#include "guardjit/IR/Parser.h"
#include "guardjit/IR/Printer.h"
#include "guardjit/IR/Verifier.h"

#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>

using namespace guardjit;

namespace {

/// Parses and verifies `Text`; on success returns the printed sets.
std::optional<std::string> parseVerifyPrint(llvm::StringRef Text) {
  llvm::SourceMgr SM;
  SM.setDiagHandler(fuzz::discardDiagnostic);
  unsigned Id = SM.AddNewSourceBuffer(
      llvm::MemoryBuffer::getMemBufferCopy(Text, "fuzz.gir"), llvm::SMLoc());
  std::optional<std::vector<ParsedGuardSet>> Sets = parseGir(SM, Id);
  if (!Sets)
    return std::nullopt;
  bool Ok = true;
  for (const ParsedGuardSet &P : *Sets)
    Ok &= verifyGuardSet(P.Set, P.Locs, SM);
  if (!Ok)
    return std::nullopt;
  std::vector<GuardSet> Plain;
  for (ParsedGuardSet &P : *Sets)
    Plain.push_back(std::move(P.Set));
  return printGuardSets(Plain);
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *Data, size_t Size) {
  llvm::StringRef Input(reinterpret_cast<const char *>(Data), Size);
  std::optional<std::string> First = parseVerifyPrint(Input);
  if (!First)
    return 0;
  std::optional<std::string> Second = parseVerifyPrint(*First);
  if (!Second)
    fuzz::fail("printed IR does not parse or verify", *First, "");
  if (*Second != *First)
    fuzz::fail("print(parse(print(S))) != print(S)", *First, *Second);
  return 0;
}

//===- KindSupportDocTest.cpp - docs/kind-support.md lists every kind -----===//
//
// The support table is documentation; this keeps it complete: every guard
// and accessor kind of the .def files must have a row.
//
//===----------------------------------------------------------------------===//
#include "guardjit/IR/GuardSet.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

using namespace guardjit;

namespace {

std::string readDoc() {
  std::ifstream In(std::string(GJ_SOURCE_DIR) + "/docs/kind-support.md");
  std::stringstream SS;
  SS << In.rdbuf();
  return SS.str();
}

TEST(KindSupportDoc, EveryGuardKindHasARow) {
  std::string Doc = readDoc();
  ASSERT_FALSE(Doc.empty());
#define GJ_GUARD(Enum, Spelling, TorchName, ...)                               \
  EXPECT_NE(Doc.find("| `" Spelling "` | " TorchName " |"), std::string::npos) \
      << Spelling;
#include "guardjit/IR/Guards.def"
}

TEST(KindSupportDoc, EveryAccessorKindHasARow) {
  std::string Doc = readDoc();
  ASSERT_FALSE(Doc.empty());
#define GJ_ACCESSOR(Enum, Spelling, TorchName, ...)                            \
  EXPECT_NE(Doc.find("| `" Spelling "` | " TorchName " |"), std::string::npos) \
      << Spelling;
#include "guardjit/IR/Accessors.def"
}

} // namespace

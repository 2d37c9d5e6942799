//===- PassPipelineTest.cpp - Parsing and running pipelines ---------------===//
#include "TestUtil.h"

#include "guardjit/Transforms/PassPipeline.h"

using namespace guardjit;
using namespace guardjit::test;

namespace {

/// The column and message of a parse error.
std::pair<size_t, std::string> parseError(llvm::StringRef Text) {
  llvm::Expected<PassPipeline> P = PassPipeline::parse(Text);
  EXPECT_FALSE(P) << Text.str();
  if (P)
    return {0, ""};
  std::pair<size_t, std::string> R;
  llvm::handleAllErrors(P.takeError(), [&](const PipelineError &E) {
    R = {E.column(), E.text()};
  });
  return R;
}

TEST(PassPipelineTest, CanonicalTextRoundTrips) {
  for (llvm::StringRef Text :
       {"", "cse", "default", "skip_all_guards_unsafe,default",
        "keep_tensor_guards_unsafe<keep-parameters>,dedup",
        "keep_tensor_guards_unsafe<no-keep-parameters>"}) {
    llvm::Expected<PassPipeline> P = PassPipeline::parse(Text);
    ASSERT_TRUE(bool(P)) << llvm::toString(P.takeError());
    llvm::Expected<PassPipeline> Again = PassPipeline::parse(P->str());
    ASSERT_TRUE(bool(Again)) << llvm::toString(Again.takeError());
    EXPECT_EQ(P->str(), Again->str());
  }
  EXPECT_EQ(llvm::cantFail(PassPipeline::parse("default")).str(),
            "cse,dedup,fold-implied,dead-values,order");
  EXPECT_EQ(llvm::cantFail(PassPipeline::parse(
                               "keep_tensor_guards_unsafe<no-keep-parameters>"))
                .str(),
            "keep_tensor_guards_unsafe");
}

TEST(PassPipelineTest, ErrorsCarryTheirColumn) {
  using E = std::pair<size_t, std::string>;
  EXPECT_EQ(parseError("cse,bogus"), E(4, "unknown pass name 'bogus'"));
  EXPECT_EQ(parseError(",cse"), E(0, "expected a pass name"));
  EXPECT_EQ(parseError("cse,,dedup"), E(4, "expected a pass name"));
  EXPECT_EQ(parseError("cse<"),
            E(3, "expected '>' to close the options of 'cse'"));
  EXPECT_EQ(parseError("cse<x>dedup"), E(6, "expected ',' after 'cse'"));
  EXPECT_EQ(parseError("keep_tensor_guards_unsafe<keep-parameters;x>").first,
            42u);
  EXPECT_EQ(parseError("order,skip_all_guards_unsafe").first, 6u);
}

TEST(PassPipelineTest, RunReportsRemovalsPerPassAndCallsHooks) {
  SetBuilder B;
  ValueId X = B.local("x");
  B.value(AccessorKind::Type, X);
  ObjectId Int = B.object("int", ObjectKind::Type);
  B.guard(GuardKind::TypeMatch, {X}, Int);
  B.guard(GuardKind::TypeMatch, {X}, Int);
  B.guard(GuardKind::NotNone, {X});
  PassPipeline P = llvm::cantFail(PassPipeline::parse("dedup,dead-values"));
  std::vector<PassRunStats> Stats;
  std::vector<std::string> Seen;
  PipelineInstrumentation Instr;
  Instr.AfterPass = [&](llvm::StringRef Name, const GuardSet &S) {
    Seen.push_back(Name.str() + ":" + std::to_string(S.guards().size()));
  };
  GuardSet S = B.set();
  ASSERT_FALSE(bool(P.run(S, PassContext(), &Stats, Instr)));
  EXPECT_EQ(Seen, (std::vector<std::string>{"dedup:2", "dead-values:2"}));
  ASSERT_EQ(Stats.size(), 2u);
  EXPECT_EQ(Stats[0].Pass, "dedup");
  EXPECT_EQ(Stats[0].GuardsRemoved[size_t(GuardKind::TypeMatch)], 1);
  EXPECT_EQ(Stats[0].ValuesRemoved, 0);
  EXPECT_EQ(Stats[1].ValuesRemoved, 1);
  EXPECT_GE(Stats[1].Micros, 0.0);
}

} // namespace

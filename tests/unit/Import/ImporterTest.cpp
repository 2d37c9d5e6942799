//===- ImporterTest.cpp - TORCH_LOGS=guards importer edge cases -----------===//
#include "guardjit/Import/TorchLogImporter.h"

#include "guardjit/IR/Printer.h"
#include "guardjit/IR/Verifier.h"

#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

using namespace guardjit;

namespace {

struct Imported {
  std::optional<std::vector<ParsedGuardSet>> Sets;
  std::vector<std::string> Warnings, Errors;
};

Imported import(const std::string &Log) {
  Imported R;
  llvm::SourceMgr SM;
  SM.setDiagHandler(
      [](const llvm::SMDiagnostic &D, void *Ctx) {
        auto *Out = static_cast<Imported *>(Ctx);
        (D.getKind() == llvm::SourceMgr::DK_Warning ? Out->Warnings
                                                    : Out->Errors)
            .push_back(D.getMessage().str());
      },
      &R);
  unsigned Id = SM.AddNewSourceBuffer(
      llvm::MemoryBuffer::getMemBufferCopy(Log, "test.log"), llvm::SMLoc());
  R.Sets = importTorchLog(SM, Id);
  return R;
}

std::string tree(const std::string &Body) {
  // The blank line after the body ends the tree.
  return "TREE_GUARD_MANAGER:\n+- RootGuardManager\n" + Body + "\n\n";
}

const char *ManagerX =
    "| +- GuardManager: source=L['x'], accessed_by=FrameLocalsGuardAccessor("
    "key='x', framelocals_idx=0), type=<class 'object'>, tag_safe=(False, "
    "False)\n";

/// Every accessor repr torch 2.13 and 2.14 print for a kind Guard IR has
/// maps to that kind, and the set verifies.
TEST(TorchLogImporter, AccessorsMapToTheirKinds) {
  struct Case {
    const char *Repr;
    AccessorKind Kind;
  } Cases[] = {
      {"DictGetItemGuardAccessor('a')", AccessorKind::DictGetItem},
      {"GetItemGuardAccessor(0)", AccessorKind::GetItem},
      {"GetAttrGuardAccessor(w)", AccessorKind::GetAttr},
      {"GenericGetAttrGuardAccessor(w)", AccessorKind::GenericGetAttr},
      {"TupleGetItemGuardAccessor(-2)", AccessorKind::TupleGetItem},
      {"ListGetItemGuardAccessor(3)", AccessorKind::ListGetItem},
      {"GetGenericDictGuardAccessor", AccessorKind::GenericDict},
      {"CodeGuardAccessor", AccessorKind::Code},
      {"ClosureGuardAccessor", AccessorKind::Closure},
      {"FuncDefaultsGuardAccessor", AccessorKind::FuncDefaults},
      {"FuncKwDefaultsGuardAccessor", AccessorKind::FuncKwDefaults},
      {"TypeGuardAccessor", AccessorKind::Type},
      {"TypeDictGuardAccessor", AccessorKind::TypeDict},
      {"TypeMROGuardAccessor", AccessorKind::TypeMro},
      {"WeakRefCallGuardAccessor()", AccessorKind::WeakRefCall},
      {"CallFunctionNoArgsGuardAccessor", AccessorKind::CallFunctionNoArgs},
      {"SetGetItemGuardAccessor(index=1)", AccessorKind::SetGetItem},
  };
  for (const Case &C : Cases) {
    Imported R = import(tree(std::string(ManagerX) +
                             "| | +- GuardManager: source=S, accessed_by=" +
                             C.Repr + ", type=<class 'int'>, tag_safe=(False, "
                                      "False)\n| | | +- NONE_MATCH: S is None"));
    ASSERT_TRUE(R.Sets) << C.Repr;
    const GuardSet &S = (*R.Sets)[0].Set;
    ASSERT_EQ(S.values().size(), 3u) << C.Repr;
    EXPECT_EQ(S.value(2).Kind, C.Kind) << C.Repr;
    EXPECT_TRUE(R.Warnings.empty()) << C.Repr;
    EXPECT_FALSE(llvm::errorToBool(verifyGuardSet(S))) << C.Repr;
  }
}

TEST(TorchLogImporter, GlobalWeakRefOnlyUnderTheGlobals) {
  const char *Weak = "GuardManager: source=W, accessed_by="
                     "GlobalWeakRefGuardAccessor(w), type=<class 'int'>, "
                     "tag_safe=(False, False)";
  Imported R = import(tree(std::string("| +- GuardManager: source=G, "
                                       "accessed_by=GlobalsGuardAccessor\n") +
                           "| | +- " + Weak + "\n" + ManagerX + "| | +- " +
                           Weak));
  ASSERT_TRUE(R.Sets);
  const GuardSet &S = (*R.Sets)[0].Set;
  EXPECT_EQ(S.value(2).Kind, AccessorKind::GlobalWeakRef);
  EXPECT_EQ(S.value(2).Name, "w");
  // Under anything else it is not what Guard IR means by global_weakref.
  EXPECT_EQ(S.value(4).Kind, AccessorKind::Lambda);
  EXPECT_FALSE(llvm::errorToBool(verifyGuardSet(S)));
}

/// An accessor or guard without an IR kind becomes an opaque lambda with a
/// warning, and the set still verifies.
TEST(TorchLogImporter, UnknownConstructsAreOpaqueLambdas) {
  Imported R = import(tree(
      std::string(ManagerX) +
      "| | +- SOME_LATER_GUARD: L['x'] is L['y']\n"
      "| | +- GuardManager: source=L['x'].grad, accessed_by=GradGuardAccessor, "
      "type=<class 'NoneType'>, tag_safe=(False, False)\n"
      "| | | +- NONE_MATCH: L['x'].grad is None\n"
      "| | +- TYPE_MATCH: ___check_type_id(L['x'] garbled\n"));
  ASSERT_TRUE(R.Sets);
  const GuardSet &S = (*R.Sets)[0].Set;
  EXPECT_EQ(R.Warnings.size(), 3u);
  EXPECT_EQ(S.value(2).Kind, AccessorKind::Lambda);
  EXPECT_EQ(S.object(S.value(2).Key).Repr, "GradGuardAccessor");
  ASSERT_EQ(S.guards().size(), 3u);
  EXPECT_EQ(S.guards()[0].Kind, GuardKind::Lambda);
  EXPECT_EQ(S.object(S.guards()[0].Object).Repr, "L['x'] is L['y']");
  EXPECT_EQ(S.guards()[2].Kind, GuardKind::Lambda); // the unreadable TYPE_MATCH
  EXPECT_FALSE(llvm::errorToBool(verifyGuardSet(S)));
}

/// OBJECT_ALIASING (DUPLICATE_INPUT without the aliasing lambda, torch
/// 2.14's default) is relational like NO_TENSOR_ALIASING: printed in full
/// once, then by name under its other manager. `B is A` was installed on A's
/// manager and B's, in that order, as the recorder records it.
TEST(TorchLogImporter, ObjectAliasingIsRelational) {
  const char *ManagerY =
      "| +- GuardManager: source=L['y'], accessed_by=FrameLocalsGuardAccessor("
      "key='y', framelocals_idx=1), type=<class 'object'>, tag_safe=(False, "
      "False)\n";
  Imported R = import(tree(std::string(ManagerX) +
                           "| | +- OBJECT_ALIASING: L['x'] is L['y']"
                           "                    # f(x, y)  # m.py:3 in f\n" +
                           ManagerY + "| | +- OBJECT_ALIASING"));
  ASSERT_TRUE(R.Sets);
  EXPECT_TRUE(R.Warnings.empty());
  const GuardSet &S = (*R.Sets)[0].Set;
  ASSERT_EQ(S.guards().size(), 1u);
  const Guard &G = S.guards()[0];
  EXPECT_EQ(G.Kind, GuardKind::ObjectAliasing);
  ASSERT_EQ(G.Operands.size(), 2u);
  EXPECT_EQ(S.value(G.Operands[0]).Source, "L['y']");
  EXPECT_EQ(S.value(G.Operands[1]).Source, "L['x']");
  EXPECT_EQ(G.Attrs.Source, "L['y'] is L['x']");
  EXPECT_EQ(G.Attrs.Loc.Line, 3u);
  EXPECT_FALSE(llvm::errorToBool(verifyGuardSet(S)));

  // A side no manager reads: an opaque lambda, with a warning.
  Imported U = import(tree(std::string(ManagerX) +
                           "| | +- OBJECT_ALIASING: L['x'] is L['z']"));
  ASSERT_TRUE(U.Sets);
  EXPECT_EQ(U.Warnings.size(), 2u);
  const GuardSet &SU = (*U.Sets)[0].Set;
  ASSERT_EQ(SU.guards().size(), 1u);
  EXPECT_EQ(SU.guards()[0].Kind, GuardKind::Lambda);
  EXPECT_EQ(SU.object(SU.guards()[0].Object).Repr, "L['x'] is L['z']");
  EXPECT_FALSE(llvm::errorToBool(verifyGuardSet(SU)));
}

/// SEQUENCE_LENGTH's spellings: `not S` for 0 (both releases), and since
/// torch 2.14 `set.__len__(S) == n` / `frozenset.__len__(S) == n`.
TEST(TorchLogImporter, LengthCheckSpellings) {
  struct Case {
    const char *Line;
    GuardKind Kind;
    int64_t Len;
  } Cases[] = {
      {"LENGTH_CHECK: len(L['x']) == 3", GuardKind::LengthCheck, 3},
      {"LENGTH_CHECK: not L['x']", GuardKind::LengthCheck, 0},
      // Only torch 2.14.1 spells sets so; its guard reads a set's own size.
      {"LENGTH_CHECK: set.__len__(L['x']) == 2", GuardKind::LengthCheckSetSize, 2},
      {"LENGTH_CHECK: frozenset.__len__(L['x']) == 1", GuardKind::LengthCheckSetSize, 1},
      {"DICT_LENGTH: not L['x']", GuardKind::DictLength, 0},
      // A dict's length is never spelled through set.
      {"DICT_LENGTH: set.__len__(L['x']) == 2", GuardKind::Lambda, 0},
  };
  for (const Case &C : Cases) {
    Imported R = import(tree(std::string(ManagerX) + "| | +- " + C.Line));
    ASSERT_TRUE(R.Sets) << C.Line;
    const GuardSet &S = (*R.Sets)[0].Set;
    ASSERT_EQ(S.guards().size(), 1u) << C.Line;
    EXPECT_EQ(S.guards()[0].Kind, C.Kind) << C.Line;
    if (C.Kind != GuardKind::Lambda)
      EXPECT_EQ(S.guards()[0].Int, C.Len) << C.Line;
    EXPECT_EQ(R.Warnings.size(), C.Kind == GuardKind::Lambda ? 1u : 0u) << C.Line;
  }
}

/// PythonLambdaGuardAccessor (e.g. torch 2.14's ContextVar.get) is Guard
/// IR's lambda accessor; its callable is not in the log, so it is unbound and
/// described by the source, with a warning.
TEST(TorchLogImporter, PythonLambdaAccessorIsUnbound) {
  Imported R = import(tree(
      std::string(ManagerX) +
      "| | +- GuardManager: source=L['x'].get(), accessed_by="
      "PythonLambdaGuardAccessor, type=<class 'float'>, tag_safe=(False, "
      "False)\n| | | +- EQUALS_MATCH: L['x'].get() == 2.0"));
  ASSERT_TRUE(R.Sets);
  EXPECT_EQ(R.Warnings.size(), 1u);
  const GuardSet &S = (*R.Sets)[0].Set;
  EXPECT_EQ(S.value(2).Kind, AccessorKind::Lambda);
  EXPECT_EQ(S.object(S.value(2).Key).Repr,
            "<the Python lambda that reads L['x'].get()>");
  EXPECT_EQ(S.guards()[0].Kind, GuardKind::EqualsMatch);
  EXPECT_FALSE(llvm::errorToBool(verifyGuardSet(S)));
}

TEST(TorchLogImporter, EqualsMatchConstantMayContainTheCommentMarker) {
  Imported R = import(tree(std::string(ManagerX) +
                           "| | +- EQUALS_MATCH: L['x'] == 'a  # b'"
                           "                                  # f(x)  # m.py:7 in f"));
  ASSERT_TRUE(R.Sets);
  const GuardSet &S = (*R.Sets)[0].Set;
  ASSERT_EQ(S.guards().size(), 1u);
  EXPECT_EQ(S.object(S.guards()[0].Object).Repr, "'a  # b'");
  EXPECT_EQ(S.guards()[0].Attrs.Loc.File, "m.py");
  EXPECT_EQ(S.guards()[0].Attrs.Loc.Line, 7u);
}

TEST(TorchLogImporter, DimensionMarkingPartsMakeOneGuard) {
  Imported R = import(tree(
      std::string(ManagerX) +
      "| | +- DIMENSION_DYNAMIC_MARKING_GUARD: ((getattr(L['x'], "
      "'_dynamo_dynamic_indices', set()).issubset({0, 1})) if hasattr(L['x'], "
      "'_dynamo_dynamic_indices') else True)\n"
      "| | +- DIMENSION_DYNAMIC_MARKING_GUARD: hasattr(L['x'], "
      "'_dynamo_static_indices') == False\n"
      "| | +- DIMENSION_DYNAMIC_MARKING_GUARD: ((getattr(L['x'], "
      "'_dynamo_shape_ids', None) == {0: 3}) if hasattr(L['x'], "
      "'_dynamo_unbacked_indices') else True)\n"
      // A part naming an attribute again starts the next guard.
      "| | +- DIMENSION_DYNAMIC_MARKING_GUARD: hasattr(L['x'], "
      "'_dynamo_static_indices') == False\n"));
  ASSERT_TRUE(R.Sets);
  const GuardSet &S = (*R.Sets)[0].Set;
  ASSERT_EQ(S.guards().size(), 2u);
  EXPECT_EQ(S.object(S.guards()[0].Object).Repr,
            "({'_dynamo_dynamic_indices': {0, 1}}, ['_dynamo_static_indices'], "
            "{'_dynamo_shape_ids': ({0: 3}, '_dynamo_unbacked_indices')})");
  EXPECT_EQ(S.object(S.guards()[1].Object).Repr,
            "({}, ['_dynamo_static_indices'], {})");
  EXPECT_TRUE(R.Warnings.empty());
}

TEST(TorchLogImporter, TensorMatchFields) {
  Imported R = import(tree(
      std::string(ManagerX) +
      "| | +- TENSOR_MATCH: check_tensor(L['x'], Parameter, "
      "DispatchKeySet(CUDA, AutogradCUDA), torch.bfloat16, device=1, "
      "requires_grad=True, size=[None, 3], stride=[3, None])\n"
      "| | +- TENSOR_MATCH: check_tensor(L['x'], Tensor, "
      "DispatchKeySet(NoSuchKey), torch.float32, device=None, "
      "requires_grad=False, size=[], stride=[])\n"));
  ASSERT_TRUE(R.Sets);
  const GuardSet &S = (*R.Sets)[0].Set;
  ASSERT_EQ(S.tensorSpecs().size(), 1u);
  const TensorSpec &T = S.tensorSpec(0);
  EXPECT_EQ(T.DispatchKeys, 0x1000000002ull | 0x10002ull);
  EXPECT_EQ(T.DType, 15); // c10::ScalarType::BFloat16
  EXPECT_EQ(T.DeviceIndex, 1);
  EXPECT_TRUE(T.RequiresGrad);
  EXPECT_EQ(T.Sizes, (std::vector<std::optional<int64_t>>{std::nullopt, 3}));
  EXPECT_EQ(T.Strides, (std::vector<std::optional<int64_t>>{3, std::nullopt}));
  // An unknown dispatch key makes the second one opaque rather than wrong.
  EXPECT_EQ(S.guards()[1].Kind, GuardKind::Lambda);
  ASSERT_EQ(R.Warnings.size(), 1u);
  EXPECT_NE(R.Warnings[0].find("unknown dispatch key 'NoSuchKey'"),
            std::string::npos);
}

/// Trees are read without recursion: depth and size cost linear time.
TEST(TorchLogImporter, DeepTree) {
  constexpr int Depth = 2000; // the log itself grows as Depth^2
  std::string Log = "TREE_GUARD_MANAGER:\n+- RootGuardManager\n";
  for (int D = 1; D <= Depth; ++D) {
    std::string Line;
    for (int I = 0; I < D; ++I)
      Line += "| ";
    Log += Line + "+- GuardManager: source=s" + std::to_string(D) +
           ", accessed_by=TypeGuardAccessor\n";
  }
  Log += "\n";
  Imported R = import(Log);
  ASSERT_TRUE(R.Sets) << (R.Errors.empty() ? "" : R.Errors[0]);
  EXPECT_EQ((*R.Sets)[0].Set.values().size(), size_t(Depth + 1));
  EXPECT_EQ((*R.Sets)[0].Set.value(Depth).Parent, ValueId(Depth - 1));
}

TEST(TorchLogImporter, NamesAndEmptyLogs) {
  Imported R = import("no tree here\n\x01\x02\n");
  ASSERT_TRUE(R.Sets);
  EXPECT_TRUE(R.Sets->empty());
  R = import(tree("") + tree(""));
  ASSERT_TRUE(R.Sets);
  ASSERT_EQ(R.Sets->size(), 2u);
  EXPECT_EQ((*R.Sets)[0].Set.name(), "tree_0");
  EXPECT_EQ((*R.Sets)[1].Set.name(), "tree_1");
  R = import("TREE_GUARD_MANAGER:\n+- RootGuardManager");
  EXPECT_FALSE(R.Sets);
  ASSERT_EQ(R.Errors.size(), 1u);
  EXPECT_NE(R.Errors[0].find("truncated"), std::string::npos);
}

} // namespace

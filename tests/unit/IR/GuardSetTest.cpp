//===- GuardSetTest.cpp - Tests of the Guard IR data model ----------------===//
#include "guardjit/IR/GuardSet.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

using namespace guardjit;

namespace {

Value frameLocal(std::string Name, ObjectId Key, int64_t Index) {
  Value V;
  V.Kind = AccessorKind::FrameLocal;
  V.Parent = GuardSet::root();
  V.Name = Name;
  V.Index = Index;
  V.Key = Key;
  V.Source = "L['" + Name + "']";
  return V;
}

TEST(GuardSetTest, RootIsValueZero) {
  GuardSet S("unit0");
  EXPECT_EQ(S.name(), "unit0");
  ASSERT_EQ(S.values().size(), 1u);
  EXPECT_EQ(GuardSet::root(), 0u);
  EXPECT_EQ(S.value(0).Kind, AccessorKind::Root);
  EXPECT_EQ(S.value(0).Parent, InvalidId);
  EXPECT_EQ(S.value(0).Source, "L");
}

TEST(GuardSetTest, AddValueAlwaysAppends) {
  GuardSet S;
  ObjectId K = S.addObject({ObjectKind::Key, "'x'", true, 0});
  ValueId A = S.addValue(frameLocal("x", K, 0));
  ValueId B = S.addValue(frameLocal("x", K, 0));
  EXPECT_EQ(A, 1u);
  EXPECT_EQ(B, 2u);
  EXPECT_EQ(S.values().size(), 3u);
}

TEST(GuardSetTest, GetOrAddValueDedupsSameAccess) {
  GuardSet S;
  ObjectId KX = S.addObject({ObjectKind::Key, "'x'", true, 0});
  ObjectId KY = S.addObject({ObjectKind::Key, "'y'", true, 0});
  ValueId X = S.getOrAddValue(frameLocal("x", KX, 0));
  EXPECT_EQ(S.getOrAddValue(frameLocal("x", KX, 0)), X);
  // A different name, index or key is a different read.
  EXPECT_NE(S.getOrAddValue(frameLocal("y", KY, 1)), X);
  EXPECT_NE(S.getOrAddValue(frameLocal("x", KX, 5)), X);
  // Same name/index but a different (unbound) key entry: not provably equal.
  EXPECT_NE(S.getOrAddValue(frameLocal("x", KY, 0)), X);
  // The same accessor under a different parent is a different value.
  Value Attr;
  Attr.Kind = AccessorKind::Type;
  Attr.Parent = X;
  ValueId TX = S.getOrAddValue(Attr);
  Attr.Parent = GuardSet::root();
  EXPECT_NE(S.getOrAddValue(Attr), TX);
}

TEST(GuardSetTest, GetOrAddValueDedupsKeysBoundToOneObject) {
  GuardSet S;
  // Two table entries for the same live object (the recorder may add the
  // same key twice) are the same read once bound.
  ObjectId K1 = S.addObject({ObjectKind::Key, "'w'", true, 0x1000});
  ObjectId K2 = S.addObject({ObjectKind::Key, "'w'", true, 0x1000});
  ObjectId K3 = S.addObject({ObjectKind::Key, "'w'", true, 0x2000});
  Value V;
  V.Kind = AccessorKind::DictGetItem;
  V.Parent = GuardSet::root();
  V.Key = K1;
  ValueId A = S.getOrAddValue(V);
  V.Key = K2;
  EXPECT_EQ(S.getOrAddValue(V), A);
  V.Key = K3;
  EXPECT_NE(S.getOrAddValue(V), A);
}

TEST(GuardSetTest, CountByKind) {
  GuardSet S;
  ObjectId K = S.addObject({ObjectKind::Key, "'x'", true, 0});
  ValueId X = S.addValue(frameLocal("x", K, 0));
  for (GuardKind Kind : {GuardKind::TypeMatch, GuardKind::TypeMatch,
                         GuardKind::EqualsMatch, GuardKind::GlobalState}) {
    Guard G;
    G.Kind = Kind;
    if (Kind != GuardKind::GlobalState)
      G.Operands = {X};
    S.addGuard(G);
  }
  std::vector<size_t> Counts = S.countByKind();
  size_t NumKinds = 0;
#define GJ_GUARD(Enum, Spelling, TorchName, ...) ++NumKinds;
#include "guardjit/IR/Guards.def"
  ASSERT_EQ(Counts.size(), NumKinds);
  EXPECT_EQ(Counts[size_t(GuardKind::TypeMatch)], 2u);
  EXPECT_EQ(Counts[size_t(GuardKind::EqualsMatch)], 1u);
  EXPECT_EQ(Counts[size_t(GuardKind::GlobalState)], 1u);
  EXPECT_EQ(Counts[size_t(GuardKind::TensorMatch)], 0u);
  size_t Total = 0;
  for (size_t C : Counts)
    Total += C;
  EXPECT_EQ(Total, S.guards().size());
}

TEST(GuardSetTest, TensorSpecsAreIndexed) {
  GuardSet S;
  TensorSpec A;
  A.Sizes = {2, std::nullopt};
  A.Strides = {1, 2};
  TensorSpec B;
  B.RequiresGrad = true;
  EXPECT_EQ(S.addTensorSpec(A), 0u);
  EXPECT_EQ(S.addTensorSpec(B), 1u);
  EXPECT_FALSE(S.tensorSpec(0).Sizes[1].has_value());
  EXPECT_TRUE(S.tensorSpec(1).RequiresGrad);
}

TEST(GuardSetTest, GuardKindSpellingsRoundTrip) {
  std::set<std::string_view> Spellings, TorchNames;
#define GJ_GUARD(Enum, Spelling, TorchName, ...)                               \
  {                                                                            \
    EXPECT_EQ(spelling(GuardKind::Enum), Spelling);                            \
    EXPECT_EQ(torchName(GuardKind::Enum), TorchName);                          \
    std::optional<GuardKind> K = parseGuardKind(Spelling);                     \
    ASSERT_TRUE(K.has_value()) << Spelling;                                    \
    EXPECT_EQ(*K, GuardKind::Enum);                                            \
    EXPECT_TRUE(Spellings.insert(Spelling).second) << "duplicate " Spelling;   \
    /* One torch guard, two releases' semantics: LENGTH_CHECK. */            \
    if (GuardKind::Enum != GuardKind::LengthCheckSetSize)                      \
      EXPECT_TRUE(TorchNames.insert(TorchName).second) << "dup " TorchName;    \
  }
#include "guardjit/IR/Guards.def"
  EXPECT_FALSE(parseGuardKind("TYPE_MATCH").has_value());
  EXPECT_FALSE(parseGuardKind("").has_value());
  EXPECT_FALSE(parseGuardKind("type_matc").has_value());
}

TEST(GuardSetTest, AccessorKindSpellingsRoundTrip) {
  std::set<std::string_view> Spellings;
#define GJ_ACCESSOR(Enum, Spelling, TorchName, ...)                            \
  {                                                                            \
    EXPECT_EQ(spelling(AccessorKind::Enum), Spelling);                         \
    std::optional<AccessorKind> K = parseAccessorKind(Spelling);               \
    ASSERT_TRUE(K.has_value()) << Spelling;                                    \
    EXPECT_EQ(*K, AccessorKind::Enum);                                         \
    EXPECT_TRUE(Spellings.insert(Spelling).second) << "duplicate " Spelling;   \
  }
#include "guardjit/IR/Accessors.def"
  EXPECT_FALSE(parseAccessorKind("GetAttr").has_value());
  EXPECT_FALSE(parseAccessorKind("").has_value());
}

} // namespace

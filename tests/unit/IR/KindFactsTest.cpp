//===- KindFactsTest.cpp - Generated kind predicates ----------------------===//
//
// The predicates of IR/KindFacts.h (columns of Accessors.def / Guards.def)
// against the answers of the switches they replaced, written out here before
// those switches were deleted: RuntimeHelpers.cpp accessorReturnsNewRef;
// Order.cpp mayRunPython, checkCost, failLikelihood, readCost and its
// epilogue test; CSE.cpp isStableRead; GuardSet.cpp guardArity,
// guardReadsObject, accessorReadsKey; Verifier.cpp guardObject, valueKey,
// needs*Index and its aux test (Lowering.cpp's too); Dedup.cpp's lambda
// test; DeadValues.cpp readCannotFail; DiffSet.cpp kindRank and its
// per-kind switches; FoldImplied.cpp; SubtreeSkip.cpp residualGuardOk,
// residualAccessorOk; BoundGuardSet.cpp isTorchGuard; Embed.cpp
// needsTorch. A new kind is added to these tables too.
//
//===----------------------------------------------------------------------===//
#include "guardjit/IR/KindFacts.h"

#include "guardjit/IR/GuardSet.h"

#include <gtest/gtest.h>

#include <map>

using namespace guardjit;

namespace {

struct AccessorExpect {
  AccessorKind K;
  bool NewRef, RunsPython, Stable, ReadsKey;
  double ReadCost;
  ReadFailure Failure;
  ResidualUse Residual;
  bool NeedsTorch;
};

// clang-format off
const AccessorExpect Accessors[] = {
    {AccessorKind::Root, false, false, false, false, 0, ReadFailure::MayFail, ResidualUse::Residual, false},
    {AccessorKind::FrameLocal, false, false, true, true, 3, ReadFailure::MayFail, ResidualUse::ResidualIfStrKey, false},
    {AccessorKind::Globals, false, false, true, true, 0, ReadFailure::NeverFails, ResidualUse::Residual, false},
    {AccessorKind::DictGetItem, false, false, true, true, 3, ReadFailure::MayFail, ResidualUse::ResidualIfStrKey, false},
    {AccessorKind::GenericDict, false, false, true, false, 3, ReadFailure::MayFail, ResidualUse::Residual, false},
    {AccessorKind::GetAttr, true, true, false, true, 20, ReadFailure::MayFail, ResidualUse::NotResidual, false},
    {AccessorKind::GenericGetAttr, true, true, false, true, 20, ReadFailure::MayFail, ResidualUse::NotResidual, false},
    {AccessorKind::Code, false, false, true, false, 1, ReadFailure::MayFail, ResidualUse::Residual, false},
    {AccessorKind::Type, false, false, true, false, 1, ReadFailure::NeverFails, ResidualUse::Residual, false},
    {AccessorKind::TupleGetItem, false, false, true, false, 1, ReadFailure::MayFail, ResidualUse::Residual, false},
    {AccessorKind::ListGetItem, false, false, true, false, 1, ReadFailure::MayFail, ResidualUse::Residual, false},
    {AccessorKind::GetItem, true, true, false, true, 20, ReadFailure::MayFail, ResidualUse::NotResidual, false},
    {AccessorKind::DictKey, false, false, true, false, 5, ReadFailure::MayFail, ResidualUse::Residual, false},
    {AccessorKind::DictValue, false, false, true, false, 5, ReadFailure::MayFail, ResidualUse::Residual, false},
    {AccessorKind::Closure, false, false, true, false, 1, ReadFailure::MayFail, ResidualUse::Residual, false},
    {AccessorKind::FuncDefaults, false, false, true, false, 1, ReadFailure::MayFail, ResidualUse::Residual, false},
    {AccessorKind::FuncKwDefaults, false, false, true, false, 1, ReadFailure::MayFail, ResidualUse::Residual, false},
    {AccessorKind::TypeDict, false, false, true, false, 1, ReadFailure::FailsUnlessParentIsType, ResidualUse::Residual, false},
    {AccessorKind::TypeMro, false, false, true, false, 1, ReadFailure::FailsUnlessParentIsType, ResidualUse::Residual, false},
    {AccessorKind::Lambda, true, true, false, true, 200, ReadFailure::MayFail, ResidualUse::NotResidual, false},
    {AccessorKind::CallFunctionNoArgs, true, true, false, false, 200, ReadFailure::MayFail, ResidualUse::NotResidual, false},
    {AccessorKind::WeakRefCall, true, false, true, false, 3, ReadFailure::MayFail, ResidualUse::NotResidual, false},
    {AccessorKind::GlobalWeakRef, true, false, true, true, 5, ReadFailure::MayFail, ResidualUse::NotResidual, false},
    {AccessorKind::Grad, true, false, false, false, 10, ReadFailure::MayFail, ResidualUse::NotResidual, true},
    {AccessorKind::SetGetItem, true, false, false, false, 10, ReadFailure::MayFail, ResidualUse::NotResidual, false},
    {AccessorKind::TupleIteratorGetItem, false, false, false, false, 10, ReadFailure::MayFail, ResidualUse::NotResidual, false},
    {AccessorKind::TensorSize, true, false, false, false, 10, ReadFailure::MayFail, ResidualUse::Residual, true},
    {AccessorKind::TensorStride, true, false, false, false, 10, ReadFailure::MayFail, ResidualUse::Residual, true},
    {AccessorKind::TensorStorageOffset, true, false, false, false, 10, ReadFailure::MayFail, ResidualUse::Residual, true},
    {AccessorKind::Recorded, false, false, false, false, 10, ReadFailure::MayFail, ResidualUse::Residual, false},
    {AccessorKind::ContextVarGet, true, true, false, false, 20, ReadFailure::MayFail, ResidualUse::NotResidual, false},
};
// clang-format on

struct GuardExpect {
  GuardKind K;
  int Arity;
  bool ReadsObject, RunsPython;
  double CostOneOperand, CostThreeOperands, FailLikelihood;
  unsigned DiffRank;
  ResidualUse Residual;
  bool TorchPayload, NeedsTorch;
};

// clang-format off
const GuardExpect Guards[] = {
    {GuardKind::TypeMatch, 1, true, false, 1, 1, 0.1, 0, ResidualUse::Residual, false, false},
    {GuardKind::IdMatch, 1, true, false, 1, 1, 0.02, 0, ResidualUse::Residual, false, false},
    {GuardKind::NoneMatch, 1, false, false, 1, 1, 0.1, 0, ResidualUse::Residual, false, false},
    {GuardKind::TrueMatch, 1, false, false, 1, 1, 0.1, 0, ResidualUse::Residual, false, false},
    {GuardKind::FalseMatch, 1, false, false, 1, 1, 0.1, 0, ResidualUse::Residual, false, false},
    {GuardKind::NotNone, 1, false, false, 1, 1, 0.1, 0, ResidualUse::Residual, false, false},
    {GuardKind::EqualsMatch, 1, true, true, 4, 4, 0.1, 1, ResidualUse::ResidualIfScalarConstant, false, false},
    {GuardKind::LengthCheck, 1, false, true, 4, 4, 0.2, 1, ResidualUse::NotResidual, false, false},
    {GuardKind::LengthCheckSetSize, 1, false, true, 4, 4, 0.2, 1, ResidualUse::NotResidual, false, false},
    {GuardKind::DictLength, 1, false, false, 2, 2, 0.2, 1, ResidualUse::Residual, false, false},
    {GuardKind::DictContains, 1, true, true, 6, 6, 0.02, 1, ResidualUse::ResidualIfStrObject, false, false},
    {GuardKind::NoHasAttr, 1, true, true, 30, 30, 0.02, 3, ResidualUse::NotResidual, false, false},
    {GuardKind::TensorMatch, 1, false, false, 10, 10, 0.5, 2, ResidualUse::Residual, true, true},
    {GuardKind::DimensionMarking, 1, true, true, 30, 30, 0.02, 3, ResidualUse::Residual, false, false},
    {GuardKind::GlobalState, 0, false, false, 20, 20, 0.02, 2, ResidualUse::Residual, true, true},
    {GuardKind::DefaultDevice, 0, true, false, 4, 4, 0.02, 2, ResidualUse::Residual, false, false},
    {GuardKind::TorchFunctionModeStack, 0, true, false, 4, 4, 0.02, 2, ResidualUse::Residual, true, true},
    {GuardKind::NoTensorAliasing, -1, false, false, 4, 12, 0.2, 3, ResidualUse::Residual, false, false},
    {GuardKind::Lambda, 1, true, true, 200, 200, 0.02, 5, ResidualUse::NotResidual, false, false},
    {GuardKind::EpilogueLambda, 0, true, true, 200, 200, 0.02, 5, ResidualUse::NotResidual, false, false},
    {GuardKind::FloatIsNan, 1, false, false, 2, 2, 0.1, 2, ResidualUse::Residual, false, false},
    {GuardKind::ComplexIsNan, 1, false, false, 2, 2, 0.1, 2, ResidualUse::Residual, false, false},
    {GuardKind::DictVersion, 1, false, false, 2, 2, 0.2, 1, ResidualUse::Residual, false, false},
    {GuardKind::TupleIteratorLen, 1, true, false, 10, 10, 0.02, 1, ResidualUse::Residual, false, false},
    {GuardKind::RangeIteratorMatch, 1, true, false, 10, 10, 0.02, 1, ResidualUse::Residual, false, false},
    {GuardKind::MappingKeysMatch, 1, true, false, 10, 10, 0.02, 3, ResidualUse::NotResidual, false, false},
    {GuardKind::SetContains, 1, true, false, 10, 10, 0.02, 1, ResidualUse::NotResidual, false, false},
    {GuardKind::DispatchKeySetMatch, 1, true, false, 10, 10, 0.02, 2, ResidualUse::Residual, false, true},
    {GuardKind::DualLevelMatch, 0, true, false, 10, 10, 0.02, 1, ResidualUse::Residual, false, false},
    {GuardKind::FakeScriptTypeMatch, 1, true, false, 10, 10, 0.02, 5, ResidualUse::NotResidual, false, false},
    {GuardKind::ObjectAliasing, 2, false, false, 10, 10, 0.02, 3, ResidualUse::Residual, false, false},
    {GuardKind::StorageOverlapping, -1, false, false, 10, 10, 0.02, 3, ResidualUse::Residual, false, true},
    {GuardKind::ShapeExpr, -1, false, false, 10, 10, 0.02, 3, ResidualUse::ResidualIfNoFallback, false, false},
    {GuardKind::SavedTensorsHooks, 0, true, true, 10, 10, 0.02, 3, ResidualUse::Residual, false, true},
    {GuardKind::CowTensorMatch, 1, false, true, 10, 10, 0.02, 2, ResidualUse::NotResidual, false, true},
};
// clang-format on

TEST(KindFactsTest, AccessorColumnsMatchTheOldSwitches) {
  ASSERT_EQ(std::size(Accessors), kindfacts::NumAccessorKinds);
  for (size_t I = 0; I < std::size(Accessors); ++I) {
    const AccessorExpect &E = Accessors[I];
    ASSERT_EQ(static_cast<size_t>(E.K), I) << "table out of .def order";
    SCOPED_TRACE(std::string(spelling(E.K)));
    EXPECT_EQ(accessorReturnsNewRef(E.K), E.NewRef);
    EXPECT_EQ(mayRunPython(E.K), E.RunsPython);
    EXPECT_EQ(isStableRead(E.K), E.Stable);
    EXPECT_EQ(accessorReadsKey(E.K), E.ReadsKey);
    EXPECT_EQ(readCost(E.K), E.ReadCost);
    EXPECT_EQ(readFailure(E.K), E.Failure);
    EXPECT_EQ(residualUse(E.K), E.Residual);
    EXPECT_EQ(needsTorchHooks(E.K), E.NeedsTorch);
  }
}

TEST(KindFactsTest, GuardColumnsMatchTheOldSwitches) {
  ASSERT_EQ(std::size(Guards), kindfacts::NumGuardKinds);
  for (size_t I = 0; I < std::size(Guards); ++I) {
    const GuardExpect &E = Guards[I];
    ASSERT_EQ(static_cast<size_t>(E.K), I) << "table out of .def order";
    SCOPED_TRACE(std::string(spelling(E.K)));
    EXPECT_EQ(guardArity(E.K), E.Arity);
    EXPECT_EQ(guardReadsObject(E.K), E.ReadsObject);
    EXPECT_EQ(mayRunPython(E.K), E.RunsPython);
    EXPECT_EQ(checkCost(E.K, 1), E.CostOneOperand);
    EXPECT_EQ(checkCost(E.K, 3), E.CostThreeOperands);
    EXPECT_EQ(failLikelihood(E.K), E.FailLikelihood);
    EXPECT_EQ(diffRank(E.K), E.DiffRank);
    EXPECT_EQ(residualUse(E.K), E.Residual);
    EXPECT_EQ(hasTorchPayload(E.K), E.TorchPayload);
    EXPECT_EQ(needsTorchHooks(E.K), E.NeedsTorch);
  }
}

/// The kinds FoldImplied and DiffSet named in their switches; every other
/// kind pins nothing, is dropped by guarded-minimal and compares by fields.
TEST(KindFactsTest, PinsKeepsAndComparesMatchTheOldSwitches) {
  const std::map<GuardKind, ValuePin> Pins = {
      {GuardKind::TypeMatch, ValuePin::PinExactType},
      {GuardKind::TensorMatch, ValuePin::PinTensorType},
      {GuardKind::IdMatch, ValuePin::PinIdentity},
      {GuardKind::EqualsMatch, ValuePin::PinEqual},
      {GuardKind::NoneMatch, ValuePin::PinNone},
      {GuardKind::TrueMatch, ValuePin::PinTrue},
      {GuardKind::FalseMatch, ValuePin::PinFalse},
      {GuardKind::NotNone, ValuePin::PinNotNone},
  };
  const std::map<GuardKind, DiffKeepRule> Keeps = {
      {GuardKind::TypeMatch, DiffKeepRule::DiffKeep},
      {GuardKind::NoneMatch, DiffKeepRule::DiffKeep},
      {GuardKind::TrueMatch, DiffKeepRule::DiffKeep},
      {GuardKind::FalseMatch, DiffKeepRule::DiffKeep},
      {GuardKind::EqualsMatch, DiffKeepRule::DiffKeep},
      {GuardKind::TensorMatch, DiffKeepRule::DiffKeepWithoutSizes},
  };
  const std::map<GuardKind, DiffCompare> Compares = {
      {GuardKind::TensorMatch, DiffCompare::CompareTensorSpec},
      {GuardKind::LengthCheck, DiffCompare::CompareInt},
      {GuardKind::LengthCheckSetSize, DiffCompare::CompareInt},
      {GuardKind::DictLength, DiffCompare::CompareInt},
      {GuardKind::DictVersion, DiffCompare::CompareInt},
      {GuardKind::CowTensorMatch, DiffCompare::CompareInt},
      {GuardKind::DictContains, DiffCompare::CompareMembership},
      {GuardKind::SetContains, DiffCompare::CompareMembership},
      {GuardKind::GlobalState, DiffCompare::CompareStateJson},
      {GuardKind::ShapeExpr, DiffCompare::CompareShapeExpr},
  };
  for (size_t I = 0; I < kindfacts::NumGuardKinds; ++I) {
    auto K = static_cast<GuardKind>(I);
    SCOPED_TRACE(std::string(spelling(K)));
    auto P = Pins.find(K);
    EXPECT_EQ(valuePin(K), P == Pins.end() ? ValuePin::NoPin : P->second);
    auto D = Keeps.find(K);
    EXPECT_EQ(diffKeep(K),
              D == Keeps.end() ? DiffKeepRule::DiffDrop : D->second);
    auto C = Compares.find(K);
    EXPECT_EQ(diffCompare(K),
              C == Compares.end() ? DiffCompare::CompareFields : C->second);
  }
}

/// The verifier's object, key and index rules, and the lambda kinds Dedup
/// and Order named; every other kind has no object, key or index rule and
/// calls no user code.
TEST(KindFactsTest, VerifierRulesAndUserCallsMatchTheOldSwitches) {
  auto Bit = [](ObjectKind K) { return 1u << static_cast<unsigned>(K); };
  using OK = ObjectKind;
  const ObjectRule NoRule{};
  auto Req = [](unsigned M) { return ObjectRule{ObjectUse::Required, M}; };
  auto Opt = [](unsigned M) { return ObjectRule{ObjectUse::Optional, M}; };
  const std::map<GuardKind, ObjectRule> Objects = {
      {GuardKind::TypeMatch, Req(Bit(OK::Type))},
      {GuardKind::IdMatch, Req(0)},
      {GuardKind::EqualsMatch, Req(Bit(OK::Constant) | Bit(OK::Key))},
      {GuardKind::DictContains, Req(Bit(OK::Key) | Bit(OK::Constant))},
      {GuardKind::NoHasAttr, Req(Bit(OK::Key))},
      {GuardKind::Lambda, Req(Bit(OK::Callable))},
      {GuardKind::EpilogueLambda, Req(Bit(OK::Callable))},
      {GuardKind::DefaultDevice, Req(0)},
      {GuardKind::DimensionMarking, Req(Bit(OK::Constant))},
      {GuardKind::TorchFunctionModeStack, Req(Bit(OK::Constant))},
      {GuardKind::GlobalState, Opt(Bit(OK::State))},
      {GuardKind::TupleIteratorLen, Req(Bit(OK::Type))},
      {GuardKind::RangeIteratorMatch, Req(Bit(OK::Type))},
      {GuardKind::SavedTensorsHooks, Req(Bit(OK::Type))},
      {GuardKind::DispatchKeySetMatch, Req(Bit(OK::Type))},
      {GuardKind::FakeScriptTypeMatch, Req(Bit(OK::Type))},
      {GuardKind::MappingKeysMatch, Req(Bit(OK::Constant))},
      {GuardKind::SetContains, Req(Bit(OK::Key) | Bit(OK::Constant))},
      {GuardKind::DualLevelMatch, Req(Bit(OK::Object) | Bit(OK::State))},
      {GuardKind::ShapeExpr, Opt(Bit(OK::Callable))},
  };
  for (size_t I = 0; I < kindfacts::NumGuardKinds; ++I) {
    auto K = static_cast<GuardKind>(I);
    SCOPED_TRACE(std::string(spelling(K)));
    auto O = Objects.find(K);
    ObjectRule Want = O == Objects.end() ? NoRule : O->second;
    EXPECT_EQ(guardObjectRule(K).U, Want.U);
    EXPECT_EQ(guardObjectRule(K).Kinds, Want.Kinds);
    ObjectRule WantAux = K == GuardKind::DefaultDevice ? Req(Bit(OK::Dict))
                         : K == GuardKind::FakeScriptTypeMatch
                             ? Req(Bit(OK::Type))
                             : NoRule;
    EXPECT_EQ(guardAuxRule(K).U, WantAux.U);
    EXPECT_EQ(guardAuxRule(K).Kinds, WantAux.Kinds);
    bool Lambda = K == GuardKind::Lambda || K == GuardKind::EpilogueLambda;
    EXPECT_EQ(callsUserCode(K), Lambda);
    EXPECT_EQ(isEpilogueCall(K), K == GuardKind::EpilogueLambda);
  }
  const std::map<AccessorKind, ObjectRule> Keys = {
      {AccessorKind::FrameLocal, Req(Bit(OK::Key))},
      {AccessorKind::DictGetItem, Req(Bit(OK::Key))},
      {AccessorKind::GetAttr, Req(Bit(OK::Key))},
      {AccessorKind::GenericGetAttr, Req(Bit(OK::Key))},
      {AccessorKind::GetItem, Req(Bit(OK::Key))},
      {AccessorKind::GlobalWeakRef, Req(Bit(OK::Key))},
      {AccessorKind::Globals, Req(Bit(OK::Dict))},
      {AccessorKind::Lambda, Req(Bit(OK::Callable))},
      {AccessorKind::ContextVarGet, Opt(Bit(OK::Constant))},
  };
  const std::map<AccessorKind, IndexUse> Indices = {
      {AccessorKind::TupleGetItem, IndexUse::AnyIndex},
      {AccessorKind::ListGetItem, IndexUse::AnyIndex},
      {AccessorKind::SetGetItem, IndexUse::AnyIndex},
      {AccessorKind::TupleIteratorGetItem, IndexUse::AnyIndex},
      {AccessorKind::TensorSize, IndexUse::DimIndex},
      {AccessorKind::TensorStride, IndexUse::DimIndex},
      {AccessorKind::DictKey, IndexUse::DictIndex},
      {AccessorKind::DictValue, IndexUse::DictIndex},
  };
  for (size_t I = 0; I < kindfacts::NumAccessorKinds; ++I) {
    auto K = static_cast<AccessorKind>(I);
    SCOPED_TRACE(std::string(spelling(K)));
    auto R = Keys.find(K);
    ObjectRule Want = R == Keys.end() ? NoRule : R->second;
    EXPECT_EQ(valueKeyRule(K).U, Want.U);
    EXPECT_EQ(valueKeyRule(K).Kinds, Want.Kinds);
    auto X = Indices.find(K);
    EXPECT_EQ(valueIndexUse(K),
              X == Indices.end() ? IndexUse::NoIndex : X->second);
  }
}

// The predicates are constant expressions, usable in static tables.
static_assert(accessorReturnsNewRef(AccessorKind::GetAttr));
static_assert(!accessorReturnsNewRef(AccessorKind::DictGetItem));
static_assert(guardArity(GuardKind::NoTensorAliasing) == -1);
static_assert(checkCost(GuardKind::NoTensorAliasing, 2) == 8);

} // namespace

//===- ParserTest.cpp - .gir parser and verifier edge cases ---------------===//
#include "guardjit/IR/Parser.h"

#include "guardjit/IR/Printer.h"
#include "guardjit/IR/Verifier.h"

#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"

#include <gtest/gtest.h>

#include <limits>

using namespace guardjit;

namespace {

/// A set with every accessor kind, every guard kind and every attribute,
/// valid for the verifier. Built from the .def files, so a new kind that the
/// parser or printer forgets fails here.
GuardSet makeEverything() {
  GuardSet S("everything");
  ObjectId Ty = S.addObject({ObjectKind::Type, "<class 'torch.Tensor'>", false, 0});
  ObjectId Key = S.addObject({ObjectKind::Key, "'x'", true, 0});
  ObjectId Dict = S.addObject({ObjectKind::Dict, "<globals>", true, 0});
  ObjectId Obj = S.addObject({ObjectKind::Object, "<module>", false, 0});
  ObjectId Const = S.addObject({ObjectKind::Constant, "0.5", true, 0});
  ObjectId Fn = S.addObject({ObjectKind::Callable, "<lambda>", true, 0});
  ObjectId State = S.addObject({ObjectKind::State, "<state>", true, 0});
  // Every byte a repr can hold survives quoting.
  std::string AllBytes;
  for (int C = 0; C < 256; ++C)
    AllBytes += static_cast<char>(C);
  S.addObject({ObjectKind::Constant, AllBytes, true, 0});

  TensorSpec T;
  T.PyType = Ty;
  T.DispatchKeys = std::numeric_limits<uint64_t>::max();
  T.DType = std::numeric_limits<int8_t>::min();
  T.DeviceIndex = std::numeric_limits<int8_t>::max();
  T.RequiresGrad = true;
  T.Sizes = {std::nullopt, std::numeric_limits<int64_t>::min(), 0};
  T.Strides = {std::numeric_limits<int64_t>::max(), std::nullopt, 1};
  uint32_t Spec = S.addTensorSpec(T);

  // Origins with every flag combination that matters to a filter.
  GuardOrigin Bare;
  Bare.GuardType = "SHAPE_ENV";
  S.addOrigin(Bare);
  GuardOrigin Full;
  Full.GuardType = "TENSOR_MATCH";
  Full.Name = "self.layers[0].w \"q\"";
  Full.DerivedGuardTypes = {"ID_MATCH", "TYPE_MATCH"};
  Full.HasValue = Full.IsGlobal = Full.ValueIsParameter = true;
  Full.UnspecializedNNModule = Full.UnspecializedBuiltinNNModule = true;
  S.addOrigin(Full);

  ValueId Last = GuardSet::root();
  ValueId GlobalsValue = GuardSet::root();
#define GJ_ACCESSOR(Enum, Spelling, TorchName, ...)                            \
  if (AccessorKind::Enum != AccessorKind::Root) {                              \
    Value V;                                                                   \
    V.Kind = AccessorKind::Enum;                                               \
    V.Parent = Last;                                                           \
    V.Source = Spelling;                                                       \
    if (AccessorKind::Enum == AccessorKind::Globals)                           \
      V.Key = Dict;                                                            \
    else if (AccessorKind::Enum == AccessorKind::Lambda)                       \
      V.Key = Fn;                                                              \
    else if (AccessorKind::Enum == AccessorKind::ContextVarGet)                \
      V.Key = Const;                                                           \
    else if (AccessorKind::Enum == AccessorKind::FrameLocal ||                 \
             AccessorKind::Enum == AccessorKind::DictGetItem ||                \
             AccessorKind::Enum == AccessorKind::GetAttr ||                    \
             AccessorKind::Enum == AccessorKind::GenericGetAttr ||             \
             AccessorKind::Enum == AccessorKind::GetItem ||                    \
             AccessorKind::Enum == AccessorKind::GlobalWeakRef) {              \
      V.Key = Key;                                                             \
      V.Name = "x";                                                            \
    }                                                                          \
    if (AccessorKind::Enum == AccessorKind::GlobalWeakRef)                     \
      V.Parent = GlobalsValue;                                                 \
    if (AccessorKind::Enum == AccessorKind::TupleGetItem)                      \
      V.Index = -5;                                                            \
    else if (AccessorKind::Enum == AccessorKind::SetGetItem ||                 \
             AccessorKind::Enum == AccessorKind::TupleIteratorGetItem)         \
      V.Index = 2;                                                             \
    else if (AccessorKind::Enum == AccessorKind::ListGetItem)                  \
      V.Index = std::numeric_limits<int64_t>::max();                           \
    else if (AccessorKind::Enum == AccessorKind::DictKey ||                    \
             AccessorKind::Enum == AccessorKind::DictValue)                    \
      V.Index = 0;                                                             \
    else if (AccessorKind::Enum == AccessorKind::TensorSize)                   \
      V.Index = 1;                                                             \
    else if (AccessorKind::Enum == AccessorKind::TensorStride)                 \
      V.Index = 0;                                                             \
    if (AccessorKind::Enum == AccessorKind::Recorded) {                        \
      V.Parent = GuardSet::root();                                             \
      V.Index = 3;                                                             \
    }                                                                          \
    Last = S.addValue(V);                                                      \
    if (AccessorKind::Enum == AccessorKind::Globals)                           \
      GlobalsValue = Last;                                                     \
  }
#include "guardjit/IR/Accessors.def"

  uint32_t N = 0;
#define GJ_GUARD(Enum, Spelling, TorchName, ...)                               \
  {                                                                            \
    Guard G;                                                                   \
    G.Kind = GuardKind::Enum;                                                  \
    G.Attrs.Source = Spelling;                                                 \
    G.Origin = N % 3 == 2 ? InvalidId : N % 3;                                 \
    G.Attrs.VerboseCode = N % 2 ? "" : "verbose \"" Spelling "\"";             \
    G.Attrs.Loc = {N % 3 ? "model.py" : "", N};                                \
    ++N;                                                                       \
    switch (G.Kind) {                                                          \
    case GuardKind::GlobalState:                                               \
      G.Object = State;                                                        \
      G.Str = "{\"grad_mode\": true}";                                         \
      break;                                                                   \
    case GuardKind::DefaultDevice:                                             \
      G.Object = Const;                                                        \
      G.Aux = Dict;                                                            \
      break;                                                                   \
    case GuardKind::TorchFunctionModeStack:                                    \
      G.Object = Const;                                                        \
      break;                                                                   \
    case GuardKind::EpilogueLambda:                                            \
      G.Object = Fn;                                                           \
      break;                                                                   \
    case GuardKind::DualLevelMatch:                                            \
      G.Object = Obj;                                                          \
      G.Int = -1;                                                              \
      break;                                                                   \
    case GuardKind::SavedTensorsHooks:                                         \
      G.Object = Ty;                                                           \
      G.Int = 1;                                                               \
      G.Ints = {0x7f0012345678, std::numeric_limits<int64_t>::max()};          \
      break;                                                                   \
    case GuardKind::ObjectAliasing:                                            \
      G.Operands = {1, Last};                                                  \
      break;                                                                   \
    case GuardKind::NoTensorAliasing:                                          \
    case GuardKind::StorageOverlapping:                                        \
      G.Operands = {1, 2, Last};                                               \
      break;                                                                   \
    default:                                                                   \
      G.Operands = {Last};                                                     \
      break;                                                                   \
    }                                                                          \
    switch (G.Kind) {                                                          \
    case GuardKind::TypeMatch:                                                 \
      G.Object = Ty;                                                           \
      break;                                                                   \
    case GuardKind::IdMatch:                                                   \
      G.Object = Obj;                                                          \
      break;                                                                   \
    case GuardKind::EqualsMatch:                                               \
    case GuardKind::DimensionMarking:                                          \
      G.Object = Const;                                                        \
      break;                                                                   \
    case GuardKind::DictContains:                                              \
      G.Object = Key;                                                          \
      G.Int = 1;                                                               \
      break;                                                                   \
    case GuardKind::NoHasAttr:                                                 \
      G.Object = Key;                                                          \
      break;                                                                   \
    case GuardKind::Lambda:                                                    \
      G.Object = Fn;                                                           \
      break;                                                                   \
    case GuardKind::LengthCheck:                                               \
    case GuardKind::LengthCheckSetSize:                                        \
      G.Int = std::numeric_limits<int64_t>::min();                             \
      break;                                                                   \
    case GuardKind::DictLength:                                                \
      G.Int = 3;                                                               \
      break;                                                                   \
    case GuardKind::TensorMatch:                                               \
      G.Tensor = Spec;                                                         \
      break;                                                                   \
    case GuardKind::TupleIteratorLen:                                          \
    case GuardKind::DispatchKeySetMatch:                                       \
      G.Object = Ty;                                                           \
      G.Int = std::numeric_limits<int64_t>::min();                             \
      break;                                                                   \
    case GuardKind::RangeIteratorMatch:                                        \
      G.Object = Ty;                                                           \
      G.Ints = {std::numeric_limits<int64_t>::min(), 0,                        \
                std::numeric_limits<int64_t>::max()};                          \
      break;                                                                   \
    case GuardKind::FakeScriptTypeMatch:                                       \
      G.Object = Ty;                                                           \
      G.Aux = Ty;                                                              \
      break;                                                                   \
    case GuardKind::MappingKeysMatch:                                          \
      G.Object = Const;                                                        \
      break;                                                                   \
    case GuardKind::SetContains:                                               \
      G.Object = Key;                                                          \
      break;                                                                   \
    case GuardKind::StorageOverlapping:                                        \
      G.Int = 2;                                                               \
      break;                                                                   \
    case GuardKind::CowTensorMatch:                                            \
      G.Int = 1;                                                               \
      break;                                                                   \
    case GuardKind::ShapeExpr:                                                 \
      G.Object = Fn;                                                           \
      G.Expr = cantFail(parseShapeExprString(                                  \
          "(and (ge (int $0) -9223372036854775808) (not (isnan (truediv "      \
          "(to_float (int $0)) -0.5))) (or (eq (mod (int $0) 3) 0) (lt "       \
          "(max (int $0) 7) (floordiv (int $0) 2))) (ne nan (min inf -inf "    \
          "1e-300)))"));                                                       \
      break;                                                                   \
    default:                                                                   \
      break;                                                                   \
    }                                                                          \
    S.addGuard(G);                                                             \
  }
#include "guardjit/IR/Guards.def"
  return S;
}

std::vector<GuardSet> parseOk(const std::string &Text) {
  auto Sets = parseGirString(Text, "test.gir");
  if (!Sets) {
    ADD_FAILURE() << llvm::toString(Sets.takeError());
    return {};
  }
  return std::move(*Sets);
}

std::string parseError(const std::string &Text) {
  auto Sets = parseGirString(Text, "test.gir");
  if (Sets) {
    ADD_FAILURE() << "parsed:\n" << Text;
    return "";
  }
  return llvm::toString(Sets.takeError());
}

TEST(ParserTest, EveryKindRoundTrips) {
  GuardSet S = makeEverything();
  ASSERT_FALSE(static_cast<bool>(verifyGuardSet(S)));
  std::string Text = printGuardSet(S);
  std::vector<GuardSet> Sets = parseOk(Text);
  ASSERT_EQ(Sets.size(), 1u);
  EXPECT_EQ(printGuardSet(Sets[0]), Text);

  // Field by field for what the text encodes less directly.
  const GuardSet &P = Sets[0];
  ASSERT_EQ(P.objects().size(), S.objects().size());
  for (size_t I = 0; I < S.objects().size(); ++I) {
    EXPECT_EQ(P.object(I).Repr, S.object(I).Repr);
    EXPECT_EQ(P.object(I).Kind, S.object(I).Kind);
    EXPECT_EQ(P.object(I).Strong, S.object(I).Strong);
    EXPECT_EQ(P.object(I).Address, 0u) << "addresses are never parsed";
  }
  ASSERT_EQ(P.values().size(), S.values().size());
  for (size_t I = 0; I < S.values().size(); ++I) {
    EXPECT_EQ(P.value(I).Kind, S.value(I).Kind);
    EXPECT_EQ(P.value(I).Parent, S.value(I).Parent);
    EXPECT_EQ(P.value(I).Index, S.value(I).Index);
    EXPECT_EQ(P.value(I).Key, S.value(I).Key);
    EXPECT_EQ(P.value(I).Name, S.value(I).Name);
  }
  const TensorSpec &T = P.tensorSpec(0), &U = S.tensorSpec(0);
  EXPECT_EQ(T.DispatchKeys, U.DispatchKeys);
  EXPECT_EQ(T.DType, U.DType);
  EXPECT_EQ(T.DeviceIndex, U.DeviceIndex);
  EXPECT_EQ(T.Sizes, U.Sizes);
  EXPECT_EQ(T.Strides, U.Strides);
  ASSERT_EQ(P.origins().size(), S.origins().size());
  for (size_t I = 0; I < S.origins().size(); ++I) {
    const GuardOrigin &A = P.origins()[I], &B = S.origins()[I];
    EXPECT_EQ(A.GuardType, B.GuardType);
    EXPECT_EQ(A.Name, B.Name);
    EXPECT_EQ(A.DerivedGuardTypes, B.DerivedGuardTypes);
    EXPECT_EQ(A.HasValue, B.HasValue);
    EXPECT_EQ(A.IsGlobal, B.IsGlobal);
    EXPECT_EQ(A.ValueIsParameter, B.ValueIsParameter);
    EXPECT_EQ(A.UnspecializedNNModule, B.UnspecializedNNModule);
    EXPECT_EQ(A.UnspecializedBuiltinNNModule, B.UnspecializedBuiltinNNModule);
  }
  ASSERT_EQ(P.guards().size(), S.guards().size());
  for (size_t I = 0; I < S.guards().size(); ++I) {
    const Guard &A = P.guards()[I], &B = S.guards()[I];
    EXPECT_EQ(A.Kind, B.Kind);
    EXPECT_EQ(A.Operands, B.Operands);
    EXPECT_EQ(A.Object, B.Object);
    EXPECT_EQ(A.Aux, B.Aux);
    EXPECT_EQ(A.Int, B.Int);
    EXPECT_EQ(A.Ints, B.Ints);
    EXPECT_EQ(A.Str, B.Str);
    EXPECT_EQ(A.Tensor, B.Tensor);
    EXPECT_EQ(A.Attrs.Source, B.Attrs.Source);
    EXPECT_EQ(A.Origin, B.Origin);
    EXPECT_EQ(A.Attrs.VerboseCode, B.Attrs.VerboseCode);
    EXPECT_EQ(A.Attrs.Loc.File, B.Attrs.Loc.File);
    EXPECT_EQ(A.Attrs.Loc.Line, B.Attrs.Loc.Line);
  }
}

TEST(ParserTest, SeveralSetsRoundTrip) {
  std::vector<GuardSet> Sets;
  Sets.push_back(makeEverything());
  Sets.emplace_back("");
  Sets.push_back(makeEverything());
  Sets.back().setName("again \"quoted\"");
  std::string Text = printGuardSets(Sets);
  std::vector<GuardSet> Parsed = parseOk(Text);
  ASSERT_EQ(Parsed.size(), 3u);
  EXPECT_EQ(Parsed[1].name(), "");
  EXPECT_EQ(Parsed[2].name(), "again \"quoted\"");
  EXPECT_EQ(printGuardSets(Parsed), Text);
}

TEST(ParserTest, EmptyInputHasNoSets) {
  EXPECT_TRUE(parseOk("").empty());
  EXPECT_TRUE(parseOk("// only a comment").empty());
  EXPECT_TRUE(parseOk("\n\n  \n").empty());
}

TEST(ParserTest, ErrorsAreLocated) {
  EXPECT_EQ(parseError("guard_set \"a\" {\n  %1 = typo %0\n}\n"),
            "test.gir:2:8: error: unknown accessor 'typo'\n"
            "  %1 = typo %0\n"
            "       ^");
  // The verifier's errors carry locations too, several per set.
  std::string E = parseError("guard_set \"a\" {\n"
                             "  guard type_match %3\n"
                             "  guard lambda %0 object=#1\n"
                             "}\n");
  EXPECT_NE(E.find("test.gir:2:20: error: use of undefined value %3"),
            std::string::npos)
      << E;
  EXPECT_NE(E.find("test.gir:2:3: error: type_match needs object=#N"),
            std::string::npos)
      << E;
  EXPECT_NE(E.find("test.gir:3:26: error: use of undefined object #1"),
            std::string::npos)
      << E;
}

TEST(ParserTest, LocationsPointAtReferences) {
  llvm::SourceMgr SM;
  const char *Text = "guard_set \"a\" {\n"
                     "  object #0 = key strong \"'x'\"\n"
                     "  %1 = frame_local %0 key=#0\n"
                     "  guard no_tensor_aliasing %1, %0 source=\"\"\n"
                     "}\n";
  unsigned Id = SM.AddNewSourceBuffer(
      llvm::MemoryBuffer::getMemBufferCopy(Text, "loc.gir"), llvm::SMLoc());
  auto Sets = parseGir(SM, Id);
  ASSERT_TRUE(Sets.has_value());
  ASSERT_EQ(Sets->size(), 1u);
  const GuardSetLocs &L = (*Sets)[0].Locs;
  auto LineCol = [&](llvm::SMLoc Loc) { return SM.getLineAndColumn(Loc, Id); };
  EXPECT_EQ(LineCol(L.Set), std::make_pair(1u, 1u));
  EXPECT_EQ(LineCol(L.Objects[0].Start), std::make_pair(2u, 3u));
  // The root has no line: it is located at its set.
  EXPECT_EQ(LineCol(L.Values[0].Start), std::make_pair(1u, 1u));
  EXPECT_EQ(LineCol(L.Values[1].Start), std::make_pair(3u, 3u));
  EXPECT_EQ(LineCol(L.Values[1].operand(0)), std::make_pair(3u, 20u));
  EXPECT_EQ(LineCol(L.Values[1].at(L.Values[1].Object)),
            std::make_pair(3u, 27u));
  ASSERT_EQ(L.Guards[0].Operands.size(), 2u);
  EXPECT_EQ(LineCol(L.Guards[0].operand(1)), std::make_pair(4u, 32u));
  // Unset fields fall back to the entity.
  EXPECT_EQ(LineCol(L.Guards[0].at(L.Guards[0].Object)),
            std::make_pair(4u, 3u));
}

TEST(VerifierTest, ProgrammaticErrorsNameTheEntity) {
  GuardSet S("unit");
  Guard G;
  G.Kind = GuardKind::TypeMatch;
  G.Operands = {0};
  S.addGuard(G);
  Value V;
  V.Kind = AccessorKind::TupleGetItem;
  V.Parent = 0;
  S.addValue(V);
  llvm::Error E = verifyGuardSet(S);
  ASSERT_TRUE(static_cast<bool>(E));
  EXPECT_EQ(llvm::toString(std::move(E)),
            "guard set 'unit': value %1 (tuple_get_item): tuple_get_item "
            "needs index=N\n"
            "guard set 'unit': guard 0 (type_match): type_match needs "
            "object=#N");
}

TEST(VerifierTest, RootMustBeValueZero) {
  GuardSet S;
  S.values()[0].Kind = AccessorKind::Type;
  EXPECT_EQ(llvm::toString(verifyGuardSet(S)),
            "guard set 'unit': value %0 (type): %0 must be the root value");
  S.values().clear();
  EXPECT_EQ(llvm::toString(verifyGuardSet(S)),
            "guard set 'unit': a guard set needs the root value %0");
  GuardSet R;
  R.values()[0].Parent = 0;
  EXPECT_EQ(llvm::toString(verifyGuardSet(R)),
            "guard set 'unit': value %0 (root): the root value has no parent");
}

TEST(VerifierTest, DiagnosticsSayWhichField) {
  GuardSet S;
  Guard G;
  G.Kind = GuardKind::NoTensorAliasing;
  G.Operands = {0, 0};
  G.Tensor = 2;
  S.addGuard(G);
  S.guards()[0].Operands[1] = 7; // addGuard asserts; the verifier must not
  std::vector<VerifierDiagnostic> Diags;
  EXPECT_FALSE(verifyGuardSet(
      S, [&](const VerifierDiagnostic &D) { Diags.push_back(D); }));
  ASSERT_EQ(Diags.size(), 2u);
  EXPECT_EQ(Diags[0].Entity, VerifierDiagnostic::Guard);
  EXPECT_EQ(Diags[0].Field, VerifierDiagnostic::Operand);
  EXPECT_EQ(Diags[0].OperandIndex, 1u);
  EXPECT_EQ(Diags[0].Message, "use of undefined value %7");
  EXPECT_EQ(Diags[1].Field, VerifierDiagnostic::TensorRef);
  EXPECT_EQ(Diags[1].Message, "no_tensor_aliasing takes no tensor spec");
}

TEST(VerifierTest, EverythingIsValid) {
  EXPECT_TRUE(verifyGuardSet(makeEverything(), [](const VerifierDiagnostic &D) {
    ADD_FAILURE() << D.Message;
  }));
}

} // namespace

//===- GuardFiltersTest.cpp - torch's six filters -------------------------===//
//
// Each filter over a set with origins: which guards and values stay, the
// NO_TENSOR_ALIASING rebuilt from kept tensors, and that what stays checks
// what it checked before (the interpreter on live objects).
//
//===----------------------------------------------------------------------===//
#include "TestUtil.h"

#include "guardjit/Transforms/GuardFilters.h"

using namespace guardjit;
using namespace guardjit::test;

namespace {

/// x (input), y (input), G['g'] (global), self.w (a Parameter), a hasattr
/// accessor on x, a DictGuardManager on d, and the object-aliasing lambda.
struct Fixture {
  SetBuilder B;
  ValueId X, Y, G, GV, Self, W, HasA, D, DV;
  Fixture() {
    exec(R"(
class Obj:
    pass
gdict = {'g': 1}
alias_ok = lambda L: True
)");
    uint32_t OX = B.origin("TENSOR_MATCH"), OY = B.origin("TENSOR_MATCH");
    uint32_t OG = B.origin("EQUALS_MATCH", /*IsGlobal=*/true);
    GuardOrigin W0;
    W0.GuardType = "TENSOR_MATCH";
    W0.ValueIsParameter = W0.UnspecializedNNModule = true;
    uint32_t OW = B.set().addOrigin(W0);
    uint32_t OGS = B.origin("GLOBAL_STATE");
    uint32_t OD = B.origin("ID_MATCH");
    X = B.local("x");
    Y = B.local("y");
    G = B.value(AccessorKind::Globals, GuardSet::root(),
                B.object("gdict", ObjectKind::Dict), -1, "G");
    GV = B.value(AccessorKind::DictGetItem, G, B.str("g"), -1, "G['g']");
    Self = B.local("self");
    W = B.attr(Self, "w");
    HasA = B.attr(X, "a");
    D = B.local("d");
    DV = B.value(AccessorKind::DictValue, D, InvalidId, 0, "d[0]");
    // TENSOR_MATCH needs torch; TYPE_MATCH stands in for what it checks
    // here (the filters only read kinds and origins).
    ObjectId ObjT = B.object("Obj", ObjectKind::Type);
    B.guard(GuardKind::TensorMatch, {X}, InvalidId, 0, OX).Tensor = 0;
    B.guard(GuardKind::TypeMatch, {Y}, ObjT, 0, OY);
    B.guard(GuardKind::TensorMatch, {Y}, InvalidId, 0, OY).Tensor = 0;
    B.guard(GuardKind::EqualsMatch, {GV}, B.object("1", ObjectKind::Constant),
            0, OG);
    B.guard(GuardKind::TensorMatch, {W}, InvalidId, 0, OW).Tensor = 0;
    B.guard(GuardKind::TypeMatch, {D}, B.object("dict", ObjectKind::Type));
    B.guard(GuardKind::DictLength, {D}, InvalidId, 1);
    B.guard(GuardKind::IdMatch, {DV}, B.object("Obj"), 0, OD);
    B.guard(GuardKind::GlobalState, {}, InvalidId, 0, OGS).Str = "{}";
    B.guard(GuardKind::NoTensorAliasing, {X, Y});
    B.guard(GuardKind::EpilogueLambda, {},
            B.object("alias_ok", ObjectKind::Callable));
    TensorSpec T;
    T.PyType = ObjT;
    B.set().addTensorSpec(T);
  }
  GuardSet run(GuardFilterPass &&P) {
    GuardSet S = B.set();
    P.run(S, PassContext());
    return S;
  }
};

std::vector<std::string> kinds(const GuardSet &S) {
  std::vector<std::string> K;
  for (const Guard &G : S.guards())
    K.push_back(std::string(spelling(G.Kind)));
  return K;
}

std::vector<std::string> sources(const GuardSet &S) {
  std::vector<std::string> V;
  for (const Value &X : S.values())
    V.push_back(X.Source);
  return V;
}

using Strings = std::vector<std::string>;

TEST(GuardFiltersTest, SkipAllKeepsNothing) {
  Fixture F;
  GuardSet S = F.run(SkipAllGuardsPass());
  EXPECT_TRUE(S.guards().empty());
  EXPECT_EQ(S.values().size(), 1u);
}

TEST(GuardFiltersTest, KeepTensorGuards) {
  Fixture F;
  GuardSet S = F.run(KeepTensorGuardsPass());
  // Both guards of each kept origin stay together (y's TYPE_MATCH comes
  // from its TENSOR_MATCH origin); NO_TENSOR_ALIASING keeps x and y.
  EXPECT_EQ(kinds(S), (Strings{"tensor_match", "type_match", "tensor_match",
                               "no_tensor_aliasing"}));
  EXPECT_EQ(sources(S), (Strings{"L", "L['x']", "L['y']"}));
  GuardSet P = F.run(KeepTensorGuardsPass(/*KeepParameters=*/true));
  EXPECT_EQ(kinds(P), (Strings{"tensor_match", "type_match", "tensor_match",
                               "tensor_match", "no_tensor_aliasing"}));
  EXPECT_EQ(sources(P),
            (Strings{"L", "L['x']", "L['y']", "L['self']", "getattr w"}));
}

TEST(GuardFiltersTest, KeepPortableGuards) {
  Fixture F;
  GuardSet S = F.run(KeepPortableGuardsPass());
  EXPECT_EQ(kinds(S), (Strings{"tensor_match", "type_match", "tensor_match",
                               "tensor_match", "global_state",
                               "no_tensor_aliasing"}));
}

TEST(GuardFiltersTest, SkipGlobalsKeepsLocalHasattr) {
  Fixture F;
  GuardSet S = F.run(SkipGlobalsPass());
  EXPECT_EQ(kinds(S), (Strings{"tensor_match", "type_match", "tensor_match",
                               "tensor_match", "type_match", "dict_length",
                               "id_match", "global_state",
                               "no_tensor_aliasing", "epilogue_lambda"}));
  EXPECT_EQ(sources(S), (Strings{"L", "L['x']", "L['y']", "L['self']",
                                 "getattr w", "getattr a", "L['d']", "d[0]"}));
}

TEST(GuardFiltersTest, NNModuleFiltersDropTheModuleGuards) {
  Fixture F;
  GuardSet All = F.run(SkipAllNNModulesPass());
  EXPECT_EQ(All.guards().size(), F.B.set().guards().size() - 1);
  for (const Value &V : All.values())
    EXPECT_NE(V.Source, "getattr w");
  GuardSet Inbuilt = F.run(SkipInbuiltNNModulesPass());
  EXPECT_EQ(Inbuilt.guards().size(), F.B.set().guards().size());
}

TEST(GuardFiltersTest, AliasingNarrowsToKeptTensorsAndDisappearsBelowTwo) {
  Fixture F;
  // Drop y's origin only: one tensor left, so torch installs no aliasing
  // guard; y's read goes with its guards.
  struct DropY : GuardFilterPass {
    llvm::StringRef name() const override { return "drop-y"; }
    bool keep(const GuardOrigin &O) const override { return &O != Y; }
    Unrecorded unrecorded() const override { return Unrecorded::Keep; }
    const GuardOrigin *Y = nullptr;
  } P;
  GuardSet S = F.B.set();
  P.Y = &S.origins()[1];
  P.run(S, PassContext());
  for (const Guard &G : S.guards())
    EXPECT_NE(G.Kind, GuardKind::NoTensorAliasing);
  for (const Value &V : S.values())
    EXPECT_NE(V.Source, "L['y']");
}

TEST(GuardFiltersTest, DictGuardManagerChecksFollowTheDict) {
  Fixture F;
  // Only the ID_MATCH under d keeps d's manager (and its own checks).
  struct KeepId : GuardFilterPass {
    llvm::StringRef name() const override { return "keep-id"; }
    bool keep(const GuardOrigin &O) const override {
      return O.GuardType == "ID_MATCH";
    }
    Unrecorded unrecorded() const override { return Unrecorded::Drop; }
  };
  GuardSet S = F.run(KeepId());
  EXPECT_EQ(kinds(S), (Strings{"type_match", "dict_length", "id_match"}));
  EXPECT_TRUE(answer(S, "{'d': {'k': Obj}}"));
  EXPECT_FALSE(answer(S, "{'d': {'k': Obj, 'j': 1}}"));
  EXPECT_FALSE(answer(S, "{'d': {'k': 1}}"));
}

} // namespace

//===- PortableTest.cpp - Portable guard sets, no Python ------------------===//
//
// A real guard set (tests/corpus/mlp-dynamic: two inputs, four parameters, a
// float attribute, symbolic batch size) reduced by keep_portable_guards_unsafe
// and checked against DLPack tensors. This binary links no libpython (a ctest
// beside it checks with ldd). Device cases are synthetic: DLTensors that say
// CUDA on a CPU-only machine (no data is read).
//
//===----------------------------------------------------------------------===//
#include "guardjit/portable.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>

using namespace guardjit::portable;

namespace {

std::string readFile(const std::string &Path) {
  std::ifstream In(Path);
  std::stringstream SS;
  SS << In.rdbuf();
  return SS.str();
}

std::string header(const char *Torch = nullptr) {
  return std::string("gir torch=\"") + (Torch ? Torch : torchVersion()) +
         "\" guardjit=\"0.1.0\"\n\n";
}

/// The GLOBAL_STATE JSON recorded in the corpus file (its `str=` field).
std::string recordedGlobalState(const std::string &Gir) {
  size_t At = Gir.find("guard global_state");
  size_t Start = Gir.find("str=\"", At) + 5;
  std::string Out;
  for (size_t K = Start; Gir[K] != '"'; ++K) {
    if (Gir[K] == '\\')
      ++K;
    Out += Gir[K];
  }
  return Out;
}

/// Shapes and strides of one described tensor; `data` is never read.
struct FakeTensor {
  std::vector<int64_t> Shape, Strides;
  DLTensor T{};
  TensorExt Ext;
  FakeTensor(std::vector<int64_t> Shape, void *Data, bool Param = false)
      : Shape(std::move(Shape)) {
    T.data = Data;
    T.device = {kDLCPU, 0};
    T.ndim = static_cast<int32_t>(this->Shape.size());
    T.dtype = {kDLFloat, 32, 1};
    T.shape = this->Shape.data();
    T.strides = nullptr; // compact row-major
    Ext.RequiresGrad = Param;
    Ext.DispatchKeys = 0x1404010001; // CPU, BackendSelect, ADInplaceOrView, AutogradCPU
    Ext.PythonType = Param ? "torch.nn.parameter.Parameter" : "torch.Tensor";
  }
  void setStrides(std::vector<int64_t> S) {
    Strides = std::move(S);
    T.strides = Strides.data();
  }
};

class PortableMLP : public ::testing::Test {
protected:
  void SetUp() override {
    Gir = readFile(GJ_CORPUS_DIR "/mlp-dynamic.0_0.gir");
    ASSERT_FALSE(Gir.empty());
    std::string Error;
    std::vector<std::unique_ptr<PortableSet>> Sets;
    ASSERT_TRUE(PortableSet::load(header() + Gir, "mlp-dynamic.gir", &Sets,
                                  &Error))
        << Error;
    ASSERT_EQ(Sets.size(), 1u);
    Set = std::move(Sets[0]);
    ASSERT_TRUE(GlobalStateRecord::parse(recordedGlobalState(Gir), &Global,
                                         &Error))
        << Error;
  }

  /// Inputs in inputs() order, by source.
  std::vector<Input> inputs() {
    std::vector<Input> In;
    for (const InputInfo &I : Set->inputs()) {
      Input X;
      if (I.Source == "L['x']")
        X.Tensor = &Xt.T, X.Ext = UseExt ? &Xt.Ext : nullptr;
      else if (I.Source == "L['y']")
        X.Tensor = &Yt.T, X.Ext = UseExt ? &Yt.Ext : nullptr;
      else if (I.Source.find("['bias']") != std::string::npos)
        X.Tensor = &Bias.T, X.Ext = UseExt ? &Bias.Ext : nullptr;
      else if (I.Source.find("['weight']") != std::string::npos)
        X.Tensor = &Weight.T, X.Ext = UseExt ? &Weight.Ext : nullptr;
      else if (I.Source == "L['self'].gate")
        X.Float = Gate;
      else
        ADD_FAILURE() << "unexpected input " << I.Source;
      In.push_back(X);
    }
    return In;
  }

  bool check(std::string *Why = nullptr) {
    std::vector<Input> In = inputs();
    bool Pass = false;
    std::string Error;
    EXPECT_TRUE(Set->check(In.data(), In.size(), &Global, &Pass, &Error, Why))
        << Error;
    return Pass;
  }

  std::string Gir;
  std::unique_ptr<PortableSet> Set;
  GlobalStateRecord Global;
  float DataX[1], DataY[1], DataB[1], DataW[1];
  FakeTensor Xt{{4, 32}, DataX}, Yt{{4, 32}, DataY};
  FakeTensor Bias{{32}, DataB, true}, Weight{{32, 32}, DataW, true};
  double Gate = 0.5;
  bool UseExt = true;
};

TEST_F(PortableMLP, InputsAreTheTensorsAndScalarsTheGuardsRead) {
  std::vector<std::string> Sources;
  for (const InputInfo &I : Set->inputs())
    Sources.push_back(I.Source);
  EXPECT_EQ(Sources.size(), 7u); // x, y, 2 biases, 2 weights, gate
  EXPECT_EQ(Sources[0], "L['x']");
  EXPECT_EQ(Sources[1], "L['y']");
  // In the order the guards first read them: the tensors, then the float
  // the NaN shape guard reads.
  EXPECT_EQ(Set->inputs().back().Source, "L['self'].gate");
  EXPECT_EQ(Set->inputs().back().Kind, InputKind::Float);
  EXPECT_EQ(Set->inputs()[0].Kind, InputKind::Tensor);
}

TEST_F(PortableMLP, HitsAndShapeMisses) {
  EXPECT_TRUE(check());
  // The batch is symbolic: another batch size still hits.
  Xt.Shape[0] = Yt.Shape[0] = 9;
  EXPECT_TRUE(check());
  // x and y must agree (duck sizing) ...
  Xt.Shape[0] = 5;
  std::string Why;
  EXPECT_FALSE(check(&Why));
  EXPECT_NE(Why.find("SHAPE_ENV"), std::string::npos) << Why;
  // ... and be at least 2 (0/1 specialization).
  Xt.Shape[0] = Yt.Shape[0] = 1;
  EXPECT_FALSE(check());
  Xt.Shape[0] = Yt.Shape[0] = 4;
  // A static dim (strides as recorded, so only the size differs).
  Xt.setStrides({32, 1});
  Xt.Shape[1] = 16;
  EXPECT_FALSE(check(&Why));
  EXPECT_NE(Why.find("TENSOR_MATCH on L['x']: size"), std::string::npos) << Why;
  Xt.Shape[1] = 32;
  Xt.T.strides = nullptr;
  EXPECT_TRUE(check());
  // Rank.
  Bias.Shape.push_back(1);
  Bias.T.ndim = 2;
  Bias.T.shape = Bias.Shape.data();
  EXPECT_FALSE(check(&Why));
  EXPECT_NE(Why.find("ndim"), std::string::npos) << Why;
}

TEST_F(PortableMLP, DTypeStrideAndDeviceMisses) {
  std::string Why;
  Yt.T.dtype = {kDLFloat, 64, 1};
  EXPECT_FALSE(check(&Why));
  EXPECT_NE(Why.find("TENSOR_MATCH on L['y']: dtype"), std::string::npos) << Why;
  Yt.T.dtype = {kDLBfloat, 16, 1};
  EXPECT_FALSE(check());
  Yt.T.dtype = {kDLFloat, 32, 1};
  EXPECT_TRUE(check());

  // Explicit strides equal to the compact ones hit; a transposed layout
  // misses.
  Weight.setStrides({32, 1});
  EXPECT_TRUE(check());
  Weight.setStrides({1, 32});
  EXPECT_FALSE(check(&Why));
  EXPECT_NE(Why.find("stride"), std::string::npos) << Why;
  Weight.T.strides = nullptr;

  // Synthetic devices: a CUDA tensor, or CPU device 1.
  Xt.T.device = {kDLCUDA, 0};
  EXPECT_FALSE(check(&Why));
  EXPECT_NE(Why.find("device"), std::string::npos) << Why;
  Xt.T.device = {kDLCPU, 1};
  EXPECT_FALSE(check());
  Xt.T.device = {kDLCPU, 0};
  EXPECT_TRUE(check());
}

TEST_F(PortableMLP, ExtensionFieldsAndTheWeakerCheckWithout) {
  std::string Why;
  Bias.Ext.RequiresGrad = 0;
  EXPECT_FALSE(check(&Why));
  EXPECT_NE(Why.find("requires_grad"), std::string::npos) << Why;
  Bias.Ext.RequiresGrad = 1;
  Xt.Ext.PythonType = "torch.nn.parameter.Parameter";
  EXPECT_FALSE(check(&Why));
  EXPECT_NE(Why.find("Python type"), std::string::npos) << Why;
  Xt.Ext.PythonType = "torch.Tensor";
  Xt.Ext.DispatchKeys |= 1ull << 28; // Python key
  EXPECT_FALSE(check(&Why));
  EXPECT_NE(Why.find("dispatch keys"), std::string::npos) << Why;
  // Without a TensorExt those three are not compared (documented).
  UseExt = false;
  EXPECT_TRUE(check());
}

TEST_F(PortableMLP, ScalarsAliasingAndGlobalState) {
  std::string Why, Error;
  Gate = std::nan("");
  EXPECT_FALSE(check(&Why));
  EXPECT_NE(Why.find("SHAPE_ENV"), std::string::npos) << Why;
  Gate = 0.5;
  // x and y described as one tensor.
  Yt.T.data = Xt.T.data;
  EXPECT_FALSE(check(&Why));
  EXPECT_NE(Why.find("NO_TENSOR_ALIASING"), std::string::npos) << Why;
  Yt.T.data = DataY;
  // Another global state: grad mode off.
  std::string Json = recordedGlobalState(Gir);
  size_t At = Json.find("\"grad_mode\":true");
  ASSERT_NE(At, std::string::npos);
  Json.replace(At, 16, "\"grad_mode\":false");
  GlobalStateRecord Off;
  ASSERT_TRUE(GlobalStateRecord::parse(Json, &Off, &Error)) << Error;
  std::vector<Input> In = inputs();
  bool Pass = true;
  ASSERT_TRUE(Set->check(In.data(), In.size(), &Off, &Pass, &Error, &Why));
  EXPECT_FALSE(Pass);
  EXPECT_NE(Why.find("GLOBAL_STATE on L: grad_mode"), std::string::npos) << Why;
  // Autocast dtypes do not matter while autocast is off on both sides.
  Json = recordedGlobalState(Gir);
  At = Json.find("\"dtype\":[15");
  ASSERT_NE(At, std::string::npos);
  Json.replace(At, 11, "\"dtype\":[5");
  ASSERT_TRUE(GlobalStateRecord::parse(Json, &Off, &Error)) << Error;
  ASSERT_TRUE(Set->check(In.data(), In.size(), &Off, &Pass, &Error));
  EXPECT_TRUE(Pass);
  EXPECT_FALSE(GlobalStateRecord::parse("{\"grad_mode\": true}", &Off, &Error));
  EXPECT_NE(Error.find("autocast_state"), std::string::npos) << Error;
  EXPECT_FALSE(GlobalStateRecord::parse("{", &Off, &Error));
}

TEST_F(PortableMLP, MisuseIsAnError) {
  std::vector<Input> In = inputs();
  bool Pass;
  std::string Error;
  EXPECT_FALSE(Set->check(In.data(), In.size() - 1, &Global, &Pass, &Error));
  EXPECT_NE(Error.find("takes 7 input(s), got 6"), std::string::npos) << Error;
  In[0].Tensor = nullptr;
  EXPECT_FALSE(Set->check(In.data(), In.size(), &Global, &Pass, &Error));
  EXPECT_NE(Error.find("L['x']) needs a DLTensor"), std::string::npos) << Error;
  In = inputs();
  EXPECT_FALSE(Set->check(In.data(), In.size(), nullptr, &Pass, &Error));
  EXPECT_NE(Error.find("GlobalStateRecord"), std::string::npos) << Error;
  EXPECT_FALSE(Set->check(In.data(), In.size(), &Global, nullptr, &Error));
}

TEST(PortableLoad, ErrorsAreLocated) {
  std::string Gir = readFile(GJ_CORPUS_DIR "/mlp-dynamic.0_0.gir");
  std::vector<std::unique_ptr<PortableSet>> Sets;
  std::string Error;
  // Unfiltered, the set has guards only Python can check.
  EXPECT_FALSE(PortableSet::load(header() + Gir, "mlp.gir", &Sets, &Error,
                                 /*RunFilter=*/false));
  EXPECT_NE(Error.find("mlp.gir:"), std::string::npos) << Error;
  // The first such guard in IR order, with its line, column and caret.
  EXPECT_NE(Error.find("mlp.gir:125:3: error: AUTOGRAD_SAVED_TENSORS_HOOKS on "
                       "L: the portable check cannot evaluate "
                       "AUTOGRAD_SAVED_TENSORS_HOOKS"),
            std::string::npos)
      << Error;
  EXPECT_NE(Error.find("\n  ^"), std::string::npos) << Error;
  // Another torch; no header.
  EXPECT_FALSE(PortableSet::load(header("2.12.0") + Gir, "mlp.gir", &Sets, &Error));
  EXPECT_NE(Error.find("mlp.gir:1:1: error: recorded with torch 2.12.0"),
            std::string::npos)
      << Error;
  EXPECT_FALSE(PortableSet::load(Gir, "mlp.gir", &Sets, &Error));
  EXPECT_NE(Error.find("no 'gir torch="), std::string::npos) << Error;
  EXPECT_TRUE(PortableSet::load(Gir, "mlp.gir", &Sets, &Error, true,
                                /*AllowVersionMismatch=*/true))
      << Error;
  // Malformed text.
  EXPECT_FALSE(PortableSet::load(header() + "guard_set \"u\" {\n  %1 = x\n}\n",
                                 "bad.gir", &Sets, &Error));
  EXPECT_NE(Error.find("bad.gir:4:"), std::string::npos) << Error;
  EXPECT_EQ(Sets.size(), 1u);
}

TEST(PortableLoad, StaticShapes) {
  std::string Gir = readFile(GJ_CORPUS_DIR "/mlp.0_0.gir");
  std::vector<std::unique_ptr<PortableSet>> Sets;
  std::string Error;
  ASSERT_TRUE(PortableSet::load(header() + Gir, "mlp.gir", &Sets, &Error)) << Error;
  EXPECT_EQ(Sets[0]->inputs().size(), 6u); // no scalar: gate is specialized
}

} // namespace

//===- Portable.cpp - Guard sets checked without Python -------------------===//
//
// portable.h over the IR library (parse, verify, shape expressions) and the
// keep_portable_guards_unsafe filter. No CPython and no ATen: tensors are
// DLPack descriptions, the global state a parsed JSON record.
//
//===----------------------------------------------------------------------===//
#include "guardjit/portable.h"

#include "guardjit/IR/Parser.h"
#include "guardjit/IR/Verifier.h"
#include "guardjit/Transforms/PassPipeline.h"

#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

#include <array>
#include <map>

#ifndef GUARDJIT_TORCH_VERSION
#error "GUARDJIT_TORCH_VERSION must name the torch this library is built for"
#endif

using namespace guardjit;
using namespace guardjit::portable;

const char *guardjit::portable::torchVersion() { return GUARDJIT_TORCH_VERSION; }

//===----------------------------------------------------------------------===//
// Global state
//===----------------------------------------------------------------------===//

/// The fields torch's GlobalStateGuard::check compares (torch 2.13,
/// torch/csrc/dynamo/guards.cpp), as its JSON stores them.
struct GlobalStateRecord::Impl {
  bool GradMode = false;
  std::vector<bool> AutocastEnabled;
  std::vector<int64_t> AutocastDType;
  bool AutocastCacheEnabled = false;
  bool TorchFunction = false, TorchFunctionAllDisabled = false;
  bool Deterministic = false, DeterministicWarnOnly = false;
  bool AllowTF32 = false;
  int64_t AllowFP16Reduce = 0, AllowBF16Reduce = 0;
  int64_t NumThreads = 0, DefaultDType = 0;

  /// The first field that differs, or "" when torch's check passes.
  std::string differs(const Impl &O) const {
    if (GradMode != O.GradMode)
      return "grad_mode";
    if (AutocastEnabled.size() != O.AutocastEnabled.size())
      return "autocast_state";
    for (size_t K = 0; K < AutocastEnabled.size(); ++K) {
      // AutocastState::operator==: dtype ignored when off on both sides.
      if (!AutocastEnabled[K] && !O.AutocastEnabled[K])
        continue;
      if (AutocastEnabled[K] != O.AutocastEnabled[K] ||
          AutocastDType[K] != O.AutocastDType[K])
        return "autocast_state";
    }
    if (AutocastCacheEnabled != O.AutocastCacheEnabled)
      return "autocast_state.cached_enabled";
    if (TorchFunction != O.TorchFunction)
      return "torch_function";
    if (TorchFunctionAllDisabled != O.TorchFunctionAllDisabled)
      return "torch_function_all_disabled";
    if (Deterministic != O.Deterministic ||
        DeterministicWarnOnly != O.DeterministicWarnOnly)
      return "deterministic_algorithms";
    if (AllowTF32 != O.AllowTF32)
      return "allow_tf32";
    if (AllowFP16Reduce != O.AllowFP16Reduce)
      return "allow_fp16_reduce";
    if (AllowBF16Reduce != O.AllowBF16Reduce)
      return "allow_bf16_reduce";
    if (NumThreads != O.NumThreads)
      return "num_threads";
    if (DefaultDType != O.DefaultDType)
      return "default_dtype";
    return "";
  }
};

GlobalStateRecord::GlobalStateRecord() : I(std::make_unique<Impl>()) {}
GlobalStateRecord::~GlobalStateRecord() = default;
GlobalStateRecord::GlobalStateRecord(GlobalStateRecord &&) = default;
GlobalStateRecord &GlobalStateRecord::operator=(GlobalStateRecord &&) = default;

bool GlobalStateRecord::parse(std::string_view Json, GlobalStateRecord *Out,
                              std::string *Error) {
  auto Fail = [&](std::string Msg) {
    if (Error)
      *Error = "GlobalStateGuard JSON: " + std::move(Msg);
    return false;
  };
  if (!Out)
    return Fail("no record to fill");
  llvm::Expected<llvm::json::Value> V =
      llvm::json::parse(llvm::StringRef(Json.data(), Json.size()));
  if (!V)
    return Fail(llvm::toString(V.takeError()));
  const llvm::json::Object *O = V->getAsObject();
  if (!O)
    return Fail("not an object");
  Impl R;
  std::string Missing;
  auto Bool = [&](const llvm::json::Object &Obj, const char *Name, bool &F) {
    std::optional<bool> B = Obj.getBoolean(Name);
    if (!B && Missing.empty())
      Missing = Name;
    F = B.value_or(false);
  };
  auto Int = [&](const char *Name, int64_t &F) {
    std::optional<int64_t> X = O->getInteger(Name);
    if (!X && Missing.empty())
      Missing = Name;
    F = X.value_or(0);
  };
  Bool(*O, "grad_mode", R.GradMode);
  const llvm::json::Object *A = O->getObject("autocast_state");
  if (!A)
    return Fail("missing or mistyped field 'autocast_state'");
  const llvm::json::Array *En = A->getArray("enabled");
  const llvm::json::Array *DT = A->getArray("dtype");
  if (!En || !DT || En->size() != DT->size())
    return Fail("autocast_state needs lists 'enabled' and 'dtype' of one "
                "length");
  for (size_t K = 0; K < En->size(); ++K) {
    std::optional<bool> E = (*En)[K].getAsBoolean();
    std::optional<int64_t> D = (*DT)[K].getAsInteger();
    if (!E || !D)
      return Fail("autocast_state items must be bools and ints");
    R.AutocastEnabled.push_back(*E);
    R.AutocastDType.push_back(*D);
  }
  Bool(*A, "cached_enabled", R.AutocastCacheEnabled);
  Bool(*O, "torch_function", R.TorchFunction);
  Bool(*O, "torch_function_all_disabled", R.TorchFunctionAllDisabled);
  Bool(*O, "deterministic_algorithms", R.Deterministic);
  Bool(*O, "deterministic_algorithms_warn_only", R.DeterministicWarnOnly);
  Bool(*O, "allow_tf32", R.AllowTF32);
  Int("allow_fp16_reduce", R.AllowFP16Reduce);
  Int("allow_bf16_reduce", R.AllowBF16Reduce);
  Int("num_threads", R.NumThreads);
  Int("default_dtype", R.DefaultDType);
  if (!Missing.empty())
    return Fail("missing or mistyped field '" + Missing + "'");
  *Out->I = std::move(R);
  return true;
}

//===----------------------------------------------------------------------===//
// Tensors
//===----------------------------------------------------------------------===//

namespace {

/// c10::ScalarType (torch 2.13 numbering, lib/Import/TorchTables.def) as a
/// DLDataType; false for a dtype DLPack cannot name.
bool toDLDataType(int8_t ScalarType, DLDataType *Out) {
  struct Entry {
    int8_t Type;
    uint8_t Code, Bits;
  };
  static const Entry Table[] = {
      {0, kDLUInt, 8},        {1, kDLInt, 8},           {2, kDLInt, 16},
      {3, kDLInt, 32},        {4, kDLInt, 64},          {5, kDLFloat, 16},
      {6, kDLFloat, 32},      {7, kDLFloat, 64},        {8, kDLComplex, 32},
      {9, kDLComplex, 64},    {10, kDLComplex, 128},    {11, kDLBool, 8},
      {15, kDLBfloat, 16},    {23, kDLFloat8_e5m2, 8},  {24, kDLFloat8_e4m3fn, 8},
      {25, kDLFloat8_e5m2fnuz, 8}, {26, kDLFloat8_e4m3fnuz, 8},
      {27, kDLUInt, 16},      {28, kDLUInt, 32},        {29, kDLUInt, 64},
  };
  for (const Entry &E : Table)
    if (E.Type == ScalarType) {
      *Out = DLDataType{E.Code, E.Bits, 1};
      return true;
    }
  return false;
}

/// The DLPack device type of the backend in a raw dispatch key set (its low
/// 16 bits are c10's BackendComponent bits); false for a backend DLPack has
/// no device for (Meta, XLA, Lazy...).
bool toDLDeviceType(uint64_t DispatchKeys, DLDeviceType *Out) {
  static const std::pair<uint64_t, DLDeviceType> Backends[] = {
      {1u << 0, kDLCPU},  {1u << 1, kDLCUDA},    {1u << 2, kDLROCM},
      {1u << 4, kDLMetal}, {1u << 6, kDLOneAPI}, {1u << 11, kDLMAIA},
  };
  uint64_t Bits = DispatchKeys & 0xffff;
  for (const auto &[Bit, Type] : Backends)
    if (Bits == Bit) {
      *Out = Type;
      return true;
    }
  return false;
}

/// "<class 'torch.Tensor'>" -> "torch.Tensor".
std::string className(const std::string &Repr) {
  llvm::StringRef R(Repr);
  if (R.consume_front("<class '") && R.consume_back("'>"))
    return R.str();
  return Repr;
}

int64_t strideOf(const DLTensor &T, int Dim) {
  if (T.strides)
    return T.strides[Dim];
  // Compact row-major, as torch computes contiguous strides (size-0 and
  // size-1 dims count as 1).
  int64_t S = 1;
  for (int K = T.ndim - 1; K > Dim; --K)
    S *= T.shape[K] > 1 ? T.shape[K] : 1;
  return S;
}

/// One TENSOR_MATCH, prepared.
struct TensorCheck {
  uint32_t Input;
  DLDataType DType;
  bool DTypeKnown;
  DLDeviceType Device;
  bool DeviceKnown;
  int32_t DeviceId;
  bool RequiresGrad;
  uint64_t DispatchKeys;
  std::string PythonType;
  std::vector<std::optional<int64_t>> Sizes, Strides;
};

enum class ReadKind : uint8_t { Size, Stride, StorageOffset, Scalar };

struct ShapeRead {
  ReadKind Kind;
  uint32_t Input;
  int64_t Index; ///< dim for Size / Stride
};

struct ShapeCheck {
  const ShapeExpr *Expr;
  std::vector<ShapeRead> Reads; ///< one per operand
};

enum class StepKind : uint8_t { Tensor, Shape, Global, Aliasing, Pass };

struct Step {
  StepKind Kind;
  uint32_t Index; ///< into Tensors / Shapes / Globals; aliasing: into Alias
  std::string Describe;
};

} // namespace

struct PortableSet::Impl {
  GuardSet Set;
  std::vector<InputInfo> Inputs;
  std::vector<TensorCheck> Tensors;
  std::vector<ShapeCheck> Shapes;
  std::vector<GlobalStateRecord> Globals;
  std::vector<std::vector<uint32_t>> Aliasing; ///< tensor inputs per guard
  std::vector<Step> Steps;
};

PortableSet::PortableSet(std::unique_ptr<Impl> I) : I(std::move(I)) {}
PortableSet::~PortableSet() = default;
const std::string &PortableSet::name() const { return I->Set.name(); }
const std::vector<InputInfo> &PortableSet::inputs() const { return I->Inputs; }
size_t PortableSet::numGuards() const { return I->Set.guards().size(); }

namespace {

std::string describe(const GuardSet &S, const Guard &G) {
  std::string Src = G.Attrs.Source;
  if (Src.empty() && !G.Operands.empty())
    Src = S.value(G.Operands[0]).Source;
  return std::string(torchName(G.Kind)) + (Src.empty() ? "" : " on " + Src);
}

/// Builds the checks of `S`; on an unsupported guard returns its index.
std::optional<size_t> prepare(PortableSet::Impl &P, std::string *Why) {
  const GuardSet &S = P.Set;
  std::map<ValueId, uint32_t> InputOf;
  auto input = [&](ValueId V, InputKind K) -> std::optional<uint32_t> {
    auto It = InputOf.find(V);
    if (It != InputOf.end()) {
      if (P.Inputs[It->second].Kind != K) {
        *Why = "value " + S.value(V).Source +
               " is read both as a tensor and as a scalar, or as int and "
               "float";
        return std::nullopt;
      }
      return It->second;
    }
    uint32_t Id = static_cast<uint32_t>(P.Inputs.size());
    P.Inputs.push_back({S.value(V).Source, K});
    InputOf[V] = Id;
    return Id;
  };
  const auto &Gs = S.guards();
  for (size_t GI = 0; GI < Gs.size(); ++GI) {
    const Guard &G = Gs[GI];
    Step St{StepKind::Pass, 0, describe(S, G)};
    switch (G.Kind) {
    case GuardKind::TensorMatch: {
      auto In = input(G.Operands[0], InputKind::Tensor);
      if (!In)
        return GI;
      const TensorSpec &T = S.tensorSpec(G.Tensor);
      TensorCheck C;
      C.Input = *In;
      C.DTypeKnown = toDLDataType(T.DType, &C.DType);
      C.DeviceKnown = toDLDeviceType(T.DispatchKeys, &C.Device);
      C.DeviceId = T.DeviceIndex < 0 ? 0 : T.DeviceIndex;
      C.RequiresGrad = T.RequiresGrad;
      C.DispatchKeys = T.DispatchKeys;
      C.PythonType = className(S.object(T.PyType).Repr);
      C.Sizes = T.Sizes;
      C.Strides = T.Strides;
      St.Kind = StepKind::Tensor;
      St.Index = static_cast<uint32_t>(P.Tensors.size());
      P.Tensors.push_back(std::move(C));
      break;
    }
    case GuardKind::DimensionMarking:
      if (!input(G.Operands[0], InputKind::Tensor))
        return GI;
      break;
    case GuardKind::NoTensorAliasing: {
      std::vector<uint32_t> Ins;
      for (ValueId Op : G.Operands) {
        auto In = input(Op, InputKind::Tensor);
        if (!In)
          return GI;
        Ins.push_back(*In);
      }
      St.Kind = StepKind::Aliasing;
      St.Index = static_cast<uint32_t>(P.Aliasing.size());
      P.Aliasing.push_back(std::move(Ins));
      break;
    }
    case GuardKind::GlobalState: {
      GlobalStateRecord R;
      if (!GlobalStateRecord::parse(G.Str, &R, Why))
        return GI;
      St.Kind = StepKind::Global;
      St.Index = static_cast<uint32_t>(P.Globals.size());
      P.Globals.push_back(std::move(R));
      break;
    }
    case GuardKind::ShapeExpr: {
      ShapeCheck C;
      C.Expr = &G.Expr;
      C.Reads.resize(G.Operands.size(), {ReadKind::Scalar, 0, 0});
      std::vector<std::optional<ShapeOp>> ReadAs(G.Operands.size());
      for (const ShapeNode &N : G.Expr)
        if (N.Op == ShapeOp::ReadInt || N.Op == ShapeOp::ReadFloat)
          ReadAs[N.Int] = N.Op;
      for (size_t K = 0; K < G.Operands.size(); ++K) {
        const Value &V = S.value(G.Operands[K]);
        bool AsInt = ReadAs[K] == ShapeOp::ReadInt;
        ReadKind RK = V.Kind == AccessorKind::TensorSize     ? ReadKind::Size
                      : V.Kind == AccessorKind::TensorStride ? ReadKind::Stride
                      : V.Kind == AccessorKind::TensorStorageOffset
                          ? ReadKind::StorageOffset
                          : ReadKind::Scalar;
        std::optional<uint32_t> In;
        if (RK == ReadKind::Scalar) {
          In = input(G.Operands[K], AsInt ? InputKind::Int : InputKind::Float);
        } else {
          if (!AsInt) {
            *Why = "a tensor property read as a float";
            return GI;
          }
          In = input(V.Parent, InputKind::Tensor);
        }
        if (!In)
          return GI;
        C.Reads[K] = {RK, *In, V.Index};
      }
      St.Kind = StepKind::Shape;
      St.Index = static_cast<uint32_t>(P.Shapes.size());
      P.Shapes.push_back(std::move(C));
      break;
    }
    default:
      *Why = "the portable check cannot evaluate " +
             std::string(torchName(G.Kind)) +
             " (run keep_portable_guards_unsafe first)";
      return GI;
    }
    P.Steps.push_back(std::move(St));
  }
  return std::nullopt;
}

} // namespace

bool PortableSet::load(std::string_view GirText, std::string_view BufferName,
                       std::vector<std::unique_ptr<PortableSet>> *Out,
                       std::string *Error, bool RunFilter,
                       bool AllowVersionMismatch, const char *TorchVersion) {
  std::string Diags;
  auto Fail = [&](std::string Msg) {
    if (Error)
      *Error = std::move(Msg);
    return false;
  };
  if (!Out)
    return Fail("Out is null");
  // 1. Parse and verify, with located diagnostics.
  llvm::SourceMgr SM;
  llvm::raw_string_ostream OS(Diags);
  SM.setDiagHandler(
      [](const llvm::SMDiagnostic &D, void *Ctx) {
        D.print(nullptr, *static_cast<llvm::raw_ostream *>(Ctx), false);
      },
      &OS);
  unsigned Id = SM.AddNewSourceBuffer(
      llvm::MemoryBuffer::getMemBufferCopy(
          llvm::StringRef(GirText.data(), GirText.size()),
          llvm::StringRef(BufferName.data(), BufferName.size())),
      llvm::SMLoc());
  std::optional<ParsedGirHeader> Header;
  auto Parsed = parseGir(SM, Id, nullptr, &Header);
  bool Ok = Parsed.has_value();
  if (Ok)
    for (const ParsedGuardSet &P : *Parsed)
      Ok &= verifyGuardSet(P.Set, P.Locs, SM);
  if (!Ok)
    return Fail(llvm::StringRef(Diags).rtrim("\n").str());
  // 2. The torch it was recorded with.
  const char *Want = TorchVersion ? TorchVersion : torchVersion();
  if (!AllowVersionMismatch) {
    if (!Header)
      return Fail(std::string(BufferName) +
                  ": no 'gir torch=\"..\"' header: the torch the set was "
                  "recorded with is unknown");
    if (Header->Versions.Torch != Want) {
      SM.PrintMessage(Header->Loc, llvm::SourceMgr::DK_Error,
                      "recorded with torch " + Header->Versions.Torch +
                          ", this library checks torch " + Want);
      return Fail(llvm::StringRef(Diags).rtrim("\n").str());
    }
  }
  // 3. Filter, then prepare every guard.
  std::vector<std::unique_ptr<PortableSet>> Sets;
  for (ParsedGuardSet &PS : *Parsed) {
    auto Impl = std::make_unique<PortableSet::Impl>();
    Impl->Set = PS.Set;
    if (RunFilter) {
      auto Pipeline = PassPipeline::parse("keep_portable_guards_unsafe");
      if (!Pipeline)
        return Fail(llvm::toString(Pipeline.takeError()));
      if (llvm::Error E = Pipeline->run(Impl->Set, PassContext()))
        return Fail(llvm::toString(std::move(E)));
    }
    std::string Why;
    if (std::optional<size_t> Bad = prepare(*Impl, &Why)) {
      // Locate the guard in the text: the filter keeps guards as they were.
      const Guard &G = Impl->Set.guards()[*Bad];
      llvm::SMLoc Loc = PS.Locs.Set;
      for (size_t K = 0; K < PS.Set.guards().size(); ++K) {
        const Guard &H = PS.Set.guards()[K];
        if (H.Kind == G.Kind && H.Attrs.Source == G.Attrs.Source &&
            H.Attrs.VerboseCode == G.Attrs.VerboseCode) {
          Loc = PS.Locs.Guards[K].Start;
          break;
        }
      }
      SM.PrintMessage(Loc, llvm::SourceMgr::DK_Error,
                      describe(Impl->Set, G) + ": " + Why);
      return Fail(llvm::StringRef(Diags).rtrim("\n").str());
    }
    Sets.push_back(std::unique_ptr<PortableSet>(new PortableSet(std::move(Impl))));
  }
  for (auto &S : Sets)
    Out->push_back(std::move(S));
  return true;
}

//===----------------------------------------------------------------------===//
// Checking
//===----------------------------------------------------------------------===//

namespace {

/// TENSOR_MATCH over a DLTensor (+ TensorExt): "" when it matches, else the
/// field that differs.
const char *tensorDiffers(const TensorCheck &C, const DLTensor &T,
                          const TensorExt *Ext) {
  if (!C.DTypeKnown || T.dtype.code != C.DType.code ||
      T.dtype.bits != C.DType.bits || T.dtype.lanes != C.DType.lanes)
    return "dtype";
  if (!C.DeviceKnown || T.device.device_type != C.Device ||
      T.device.device_id != C.DeviceId)
    return "device";
  if (static_cast<size_t>(T.ndim) != C.Sizes.size() || (T.ndim && !T.shape))
    return "ndim";
  for (int K = 0; K < T.ndim; ++K) {
    if (C.Sizes[K] && *C.Sizes[K] != T.shape[K])
      return "size";
    if (C.Strides[K] && *C.Strides[K] != strideOf(T, K))
      return "stride";
  }
  if (Ext) {
    if (Ext->StructSize < sizeof(TensorExt))
      return "TensorExt.StructSize";
    if ((Ext->RequiresGrad != 0) != C.RequiresGrad)
      return "requires_grad";
    if (Ext->DispatchKeys != C.DispatchKeys)
      return "dispatch keys";
    if (!Ext->PythonType || C.PythonType != Ext->PythonType)
      return "Python type";
  }
  return "";
}

} // namespace

bool PortableSet::check(const Input *Inputs, size_t NumInputs,
                        const GlobalStateRecord *Global, bool *Pass,
                        std::string *Error, std::string *Why) const {
  auto Misuse = [&](std::string Msg) {
    if (Error)
      *Error = "guard set '" + name() + "': " + std::move(Msg);
    return false;
  };
  if (!Pass)
    return Misuse("Pass is null");
  if (NumInputs != I->Inputs.size())
    return Misuse("takes " + std::to_string(I->Inputs.size()) +
                  " input(s), got " + std::to_string(NumInputs));
  if (NumInputs && !Inputs)
    return Misuse("Inputs is null");
  for (size_t K = 0; K < NumInputs; ++K)
    if (I->Inputs[K].Kind == InputKind::Tensor && !Inputs[K].Tensor)
      return Misuse("input " + std::to_string(K) + " (" + I->Inputs[K].Source +
                    ") needs a DLTensor");
  if (!I->Globals.empty() && !Global)
    return Misuse("the set has GLOBAL_STATE: pass a GlobalStateRecord");

  auto fail = [&](const Step &S, const std::string &What) {
    *Pass = false;
    if (Why)
      *Why = S.Describe + (What.empty() ? "" : ": " + What);
    return true;
  };
  std::vector<ShapeValue> Reads;
  for (const Step &S : I->Steps) {
    switch (S.Kind) {
    case StepKind::Pass:
      break;
    case StepKind::Tensor: {
      const TensorCheck &C = I->Tensors[S.Index];
      const Input &In = Inputs[C.Input];
      if (const char *D = tensorDiffers(C, *In.Tensor, In.Ext); *D)
        return fail(S, D);
      break;
    }
    case StepKind::Global: {
      std::string D = I->Globals[S.Index].impl().differs(Global->impl());
      if (!D.empty())
        return fail(S, D);
      break;
    }
    case StepKind::Aliasing: {
      const std::vector<uint32_t> &Ins = I->Aliasing[S.Index];
      for (size_t A = 0; A < Ins.size(); ++A)
        for (size_t B = A + 1; B < Ins.size(); ++B) {
          const DLTensor *X = Inputs[Ins[A]].Tensor, *Y = Inputs[Ins[B]].Tensor;
          if (X->data == Y->data && X->byte_offset == Y->byte_offset)
            return fail(S, "two inputs are one tensor");
        }
      break;
    }
    case StepKind::Shape: {
      const ShapeCheck &C = I->Shapes[S.Index];
      Reads.assign(C.Reads.size(), ShapeValue());
      for (size_t K = 0; K < C.Reads.size(); ++K) {
        const ShapeRead &R = C.Reads[K];
        const Input &In = Inputs[R.Input];
        ShapeValue &V = Reads[K];
        V.T = ShapeType::Int;
        switch (R.Kind) {
        case ReadKind::Scalar:
          if (I->Inputs[R.Input].Kind == InputKind::Float) {
            V.T = ShapeType::Float;
            V.F = In.Float;
          } else {
            V.I = In.Int;
          }
          break;
        case ReadKind::Size:
        case ReadKind::Stride:
          // torch's size(i) / stride(i) fail for i >= dim: the guard fails.
          if (R.Index < 0 || R.Index >= In.Tensor->ndim)
            return fail(S, "dimension out of range");
          V.I = R.Kind == ReadKind::Size
                    ? In.Tensor->shape[R.Index]
                    : strideOf(*In.Tensor, static_cast<int>(R.Index));
          break;
        case ReadKind::StorageOffset: {
          int64_t Item = (In.Tensor->dtype.bits * In.Tensor->dtype.lanes + 7) / 8;
          V.I = In.Ext ? In.Ext->StorageOffset
                       : static_cast<int64_t>(In.Tensor->byte_offset) /
                             (Item ? Item : 1);
          break;
        }
        }
      }
      if (evalShapeExprValues(*C.Expr, Reads.data()) != ShapeOutcome::Pass)
        return fail(S, "");
      break;
    }
    }
  }
  *Pass = true;
  return true;
}

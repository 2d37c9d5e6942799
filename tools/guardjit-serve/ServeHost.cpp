//===- ServeHost.cpp - AOTInductor packages behind portable guards --------===//
//
// create():
//   1. read manifest.json (format guardjit-serve/1) and its inputs,
//   2. load every artifact's full set and the select sets
//      (PortableSet::load, keep_portable_guards_unsafe), map their inputs to
//      the manifest's by source,
//   3. build the host's global record,
//   4. load every AOTInductor package.
// A request: describe (DLTensor + TensorExt per input), pick (select sets,
// then the full set), run (AOTIModelPackageLoader::run).
//
//===----------------------------------------------------------------------===//
#include "ServeHost.h"

#include <ATen/Context.h>
#include <ATen/DLConvertor.h>
#include <ATen/Parallel.h>
#include <c10/core/DefaultDtype.h>
#include <c10/core/GradMode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>

#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <exception>

using namespace guardjit;
using namespace guardjit::serve;

namespace {

llvm::Error fail(const llvm::Twine &Msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), Msg);
}

std::string join(llvm::StringRef Dir, llvm::StringRef File) {
  llvm::SmallString<256> P(Dir);
  llvm::sys::path::append(P, File);
  return std::string(P);
}

llvm::Expected<std::string> readFile(const std::string &Path) {
  auto Buf = llvm::MemoryBuffer::getFile(Path);
  if (!Buf)
    return fail(Path + ": " + Buf.getError().message());
  return (*Buf)->getBuffer().str();
}

llvm::Expected<llvm::json::Value> readJson(const std::string &Path) {
  auto Text = readFile(Path);
  if (!Text)
    return Text.takeError();
  auto V = llvm::json::parse(*Text);
  if (!V)
    return fail(Path + ": " + llvm::toString(V.takeError()));
  return std::move(*V);
}

/// The bundle's (or the given) GlobalStateGuard JSON with the fields this
/// process can read replaced by its own values, grad_mode by the mode run()
/// sets.
llvm::Expected<std::string> hostGlobalState(const std::string &Path,
                                            bool GradMode) {
  auto V = readJson(Path);
  if (!V)
    return V.takeError();
  llvm::json::Object *O = V->getAsObject();
  if (!O)
    return fail(Path + ": expected a JSON object");
  auto &Ctx = at::globalContext();
  (*O)["grad_mode"] = GradMode;
  (*O)["num_threads"] = static_cast<int64_t>(at::get_num_threads());
  (*O)["default_dtype"] =
      static_cast<int64_t>(c10::get_default_dtype_as_scalartype());
  (*O)["deterministic_algorithms"] = Ctx.deterministicAlgorithms();
  (*O)["deterministic_algorithms_warn_only"] =
      Ctx.deterministicAlgorithmsWarnOnly();
  std::string Out;
  llvm::raw_string_ostream OS(Out);
  OS << *V;
  return OS.str();
}

} // namespace

std::string guardjit::serve::exceptionMessage(const std::exception &E) {
  if (const auto *C = dynamic_cast<const c10::Error *>(&E))
    return C->what_without_backtrace();
  return E.what();
}

ServeHost::~ServeHost() = default;

llvm::Error
ServeHost::loadSets(llvm::StringRef Dir, llvm::StringRef File,
                    std::vector<std::unique_ptr<portable::PortableSet>> *Out) {
  std::string Path = join(Dir, File);
  auto Text = readFile(Path);
  if (!Text)
    return Text.takeError();
  std::string Error;
  if (!portable::PortableSet::load(*Text, Path, Out, &Error))
    return fail(Error);
  return llvm::Error::success();
}

llvm::Expected<ServeHost::GuardSet>
ServeHost::takeSet(std::vector<std::unique_ptr<portable::PortableSet>> &Sets,
                   llvm::StringRef Name, llvm::StringRef File) {
  for (auto &S : Sets) {
    if (!S || S->name() != Name)
      continue;
    GuardSet G;
    for (const portable::InputInfo &In : S->inputs()) {
      if (In.Kind != portable::InputKind::Tensor)
        return fail(File + ": set '" + Name + "' reads " + In.Source +
                    " as a scalar; this host takes tensor inputs only");
      auto It = llvm::find_if(Inputs, [&](const portable::InputInfo &M) {
        return M.Source == In.Source;
      });
      if (It == Inputs.end())
        return fail(File + ": set '" + Name + "' reads " + In.Source +
                    ", which is not a manifest input");
      G.InputOf.push_back(static_cast<unsigned>(It - Inputs.begin()));
    }
    G.Set = std::move(S);
    return G;
  }
  return fail(File + ": no guard set named '" + Name + "'");
}

llvm::Expected<std::unique_ptr<ServeHost>>
ServeHost::create(llvm::StringRef Dir, const ServeOptions &Opts) {
  std::unique_ptr<ServeHost> H(new ServeHost());
  H->Opts = Opts;
  // 1. The manifest.
  std::string ManifestPath = join(Dir, "manifest.json");
  auto Manifest = readJson(ManifestPath);
  if (!Manifest)
    return Manifest.takeError();
  const llvm::json::Object *M = Manifest->getAsObject();
  if (!M)
    return fail(ManifestPath + ": expected a JSON object");
  auto Bad = [&](const llvm::Twine &What) {
    return fail(ManifestPath + ": " + What);
  };
  if (M->getString("format") != std::optional<llvm::StringRef>("guardjit-serve/1"))
    return Bad("format is not \"guardjit-serve/1\"");
  H->Model = M->getString("model").value_or("").str();
  const llvm::json::Array *Ins = M->getArray("inputs");
  if (!Ins || Ins->empty())
    return Bad("no \"inputs\"");
  for (const llvm::json::Value &In : *Ins) {
    const llvm::json::Object *I = In.getAsObject();
    auto Source = I ? I->getString("source") : std::nullopt;
    if (!Source)
      return Bad("an input without \"source\"");
    if (I->getString("kind").value_or("tensor") != "tensor")
      return Bad("input " + *Source + ": only \"tensor\" inputs are served");
    H->Inputs.push_back({Source->str(), portable::InputKind::Tensor});
  }
  const llvm::json::Array *Arts = M->getArray("artifacts");
  if (!Arts || Arts->empty())
    return Bad("no \"artifacts\"");

  // 2. Guard sets.
  const llvm::json::Object *Sel = M->getObject("select");
  H->HasSelect = Sel != nullptr;
  std::vector<std::unique_ptr<portable::PortableSet>> SelectSets;
  std::string SelectFile;
  if (Sel) {
    auto F = Sel->getString("file");
    if (!F || !Sel->getObject("sets"))
      return Bad("\"select\" needs \"file\" and \"sets\"");
    SelectFile = F->str();
    if (llvm::Error E = H->loadSets(Dir, SelectFile, &SelectSets))
      return E;
  }
  for (const llvm::json::Value &AV : *Arts) {
    const llvm::json::Object *A = AV.getAsObject();
    auto Name = A ? A->getString("name") : std::nullopt;
    auto Package = A ? A->getString("package") : std::nullopt;
    auto Guards = A ? A->getString("guards") : std::nullopt;
    auto SetName = A ? A->getString("set") : std::nullopt;
    if (!Name || !Package || !Guards || !SetName)
      return Bad("an artifact needs \"name\", \"package\", \"guards\", \"set\"");
    Artifact Art;
    Art.Name = Name->str();
    if (const llvm::json::Array *Ms = A->getArray("mutates")) {
      for (const llvm::json::Value &MV : *Ms) {
        auto Src = MV.getAsString();
        auto It = Src ? llvm::find_if(H->Inputs,
                                      [&](const portable::InputInfo &In) {
                                        return In.Source == *Src;
                                      })
                      : H->Inputs.end();
        if (It == H->Inputs.end())
          return Bad("artifact " + Art.Name +
                     ": \"mutates\" names no manifest input");
        Art.Mutates.push_back(static_cast<unsigned>(It - H->Inputs.begin()));
      }
    }
    std::vector<std::unique_ptr<portable::PortableSet>> Sets;
    if (llvm::Error E = H->loadSets(Dir, *Guards, &Sets))
      return E;
    auto Full = H->takeSet(Sets, *SetName, *Guards);
    if (!Full)
      return Full.takeError();
    Art.Full = std::move(*Full);
    if (Sel) {
      // An artifact without a select set is served only as the fallback.
      if (auto SN = Sel->getObject("sets")->getString(*Name)) {
        auto S = H->takeSet(SelectSets, *SN, SelectFile);
        if (!S)
          return S.takeError();
        Art.Select = std::move(*S);
      }
    }
    H->Artifacts.push_back(std::move(Art));
  }
  if (!Opts.Fallback.empty()) {
    for (size_t I = 0; I < H->Artifacts.size(); ++I)
      if (H->Artifacts[I].Name == Opts.Fallback)
        H->FallbackIndex = static_cast<int>(I);
    if (H->FallbackIndex < 0)
      return fail("--fallback: no artifact named '" + Opts.Fallback + "'");
  }

  // 3. The global record: the process's values over the recorded ones.
  std::string StatePath =
      Opts.GlobalStateFile.empty()
          ? join(Dir, M->getString("global_state").value_or("global_state.json"))
          : Opts.GlobalStateFile;
  if (!Opts.GlobalStateFile.empty() || llvm::sys::fs::exists(StatePath)) {
    auto Json = hostGlobalState(StatePath, Opts.GradMode);
    if (!Json)
      return Json.takeError();
    auto R = std::make_unique<portable::GlobalStateRecord>();
    std::string Error;
    if (!portable::GlobalStateRecord::parse(*Json, R.get(), &Error))
      return fail(StatePath + ": " + Error);
    H->Global = std::move(R);
  }

  // 4. Packages (AOTIModelPackageLoader extracts and dlopens the model).
  for (size_t I = 0; I < H->Artifacts.size(); ++I) {
    std::string Pkg =
        join(Dir, *(*Arts)[I].getAsObject()->getString("package"));
    try {
      H->Artifacts[I].Loader =
          std::make_unique<torch::inductor::AOTIModelPackageLoader>(
              Pkg, "model", /*run_single_threaded=*/false,
              std::max(1u, Opts.NumRunners));
    } catch (const std::exception &E) {
      return fail(Pkg + ": cannot load the AOTInductor package: " +
                  exceptionMessage(E));
    }
  }
  return H;
}

size_t ServeHost::numSelectGuards() const {
  size_t N = 0;
  for (const Artifact &A : Artifacts)
    N += A.Select.Set ? A.Select.Set->numGuards() : 0;
  return N;
}

size_t ServeHost::numFullGuards() const {
  size_t N = 0;
  for (const Artifact &A : Artifacts)
    N += A.Full.Set->numGuards();
  return N;
}

llvm::Error ServeHost::describe(const std::vector<at::Tensor> &Tensors,
                                Described *Out) const {
  if (Tensors.size() != Inputs.size())
    return fail("the request has " + llvm::Twine(Tensors.size()) +
                " tensors, the model takes " + llvm::Twine(Inputs.size()));
  Out->Tensors.resize(Tensors.size());
  Out->Exts.resize(Tensors.size());
  // Dynamo's LocalState: the thread's included / excluded keys applied.
  c10::impl::LocalDispatchKeySet Local = c10::impl::tls_local_dispatch_key_set();
  for (size_t I = 0; I < Tensors.size(); ++I) {
    const at::Tensor &T = Tensors[I];
    if (!T.defined())
      return fail("request input " + Inputs[I].Source + " is undefined");
    // Filled directly (at::toDLPack allocates a managed tensor): shape and
    // strides point into the TensorImpl, data already includes the storage
    // offset, which TensorExt carries in elements.
    DLTensor &D = Out->Tensors[I];
    try {
      // Each throws for a tensor DLPack cannot describe (a quantized dtype,
      // a device or layout without storage): a request error, not a crash.
      D.data = T.data_ptr();
      D.device = at::torchDeviceToDLDevice(T.device());
      D.dtype = at::getDLDataType(T);
    } catch (const std::exception &E) {
      return fail("request input " + Inputs[I].Source +
                  ": cannot be described as a DLTensor: " +
                  exceptionMessage(E));
    }
    D.ndim = static_cast<int32_t>(T.dim());
    D.shape = const_cast<int64_t *>(T.sizes().data());
    D.strides = const_cast<int64_t *>(T.strides().data());
    D.byte_offset = 0;
    portable::TensorExt &E = Out->Exts[I];
    E = portable::TensorExt();
    E.RequiresGrad = T.requires_grad();
    E.DispatchKeys =
        ((T.key_set() | Local.included_) - Local.excluded_).raw_repr();
    E.PythonType = "torch.Tensor";
    E.StorageOffset = T.storage_offset();
  }
  return llvm::Error::success();
}

llvm::Expected<bool> ServeHost::check(const GuardSet &S, const Described &D,
                                      std::string *Why) const {
  llvm::SmallVector<portable::Input, 4> In;
  for (unsigned K : S.InputOf) {
    portable::Input &X = In.emplace_back();
    X.Tensor = &D.Tensors[K];
    X.Ext = &D.Exts[K];
  }
  bool Pass = false;
  std::string Error;
  if (!S.Set->check(In.data(), In.size(), Global.get(), &Pass, &Error, Why))
    return fail(S.Set->name() + ": " + Error +
                (Global ? "" : " (the bundle has no global state record: "
                               "give --global-state)"));
  return Pass;
}

namespace {
/// [Lo, Hi) of the bytes a DLTensor's elements occupy; empty for no
/// elements.
std::pair<uintptr_t, uintptr_t> byteRange(const DLTensor &T) {
  uintptr_t Base = reinterpret_cast<uintptr_t>(T.data) + T.byte_offset;
  int64_t Item = (T.dtype.bits * T.dtype.lanes + 7) / 8;
  int64_t Lo = 0, Hi = 0, Contig = 1;
  for (int K = T.ndim - 1; K >= 0; --K) {
    if (T.shape[K] == 0)
      return {Base, Base};
    int64_t Stride = T.strides ? T.strides[K] : Contig;
    int64_t Span = (T.shape[K] - 1) * Stride;
    (Span < 0 ? Lo : Hi) += Span;
    Contig *= T.shape[K];
  }
  return {Base + Lo * Item, Base + (Hi + 1) * Item};
}
} // namespace

bool guardjit::serve::bytesOverlap(const DLTensor &A, const DLTensor &B) {
  auto [ALo, AHi] = byteRange(A);
  auto [BLo, BHi] = byteRange(B);
  return ALo < AHi && BLo < BHi && ALo < BHi && BLo < AHi;
}

bool ServeHost::writesDoNotOverlap(const Artifact &A, const Described &D,
                                   std::string *Why) const {
  for (unsigned M : A.Mutates) {
    for (unsigned K = 0; K < D.Tensors.size(); ++K) {
      if (K != M && bytesOverlap(D.Tensors[M], D.Tensors[K])) {
        if (Why)
          *Why = "the package writes " + Inputs[M].Source +
                 ", which overlaps " + Inputs[K].Source + " in memory";
        return false;
      }
    }
  }
  return true;
}

llvm::Expected<bool> ServeHost::checkFull(size_t I, const Described &D,
                                          std::string *Why) const {
  return check(Artifacts[I].Full, D, Why);
}

llvm::Expected<int> ServeHost::selectOnly(const Described &D) const {
  for (size_t I = 0; I < Artifacts.size(); ++I) {
    const Artifact &A = Artifacts[I];
    if (HasSelect && !A.Select.Set)
      continue;
    auto Pass = check(HasSelect ? A.Select : A.Full, D, nullptr);
    if (!Pass)
      return Pass.takeError();
    if (*Pass)
      return static_cast<int>(I);
  }
  return -1;
}

llvm::Expected<Decision> ServeHost::pick(const Described &D) const {
  // Misses are rare: the hot path builds no message; a miss is decided
  // again with messages.
  auto Dec = pickImpl(D, nullptr);
  if (!Dec || Dec->Artifact >= 0)
    return Dec;
  std::string Why;
  return pickImpl(D, &Why);
}

llvm::Expected<Decision> ServeHost::pickImpl(const Described &D,
                                             std::string *Why) const {
  Decision Dec;
  // Appends "<artifact>: <failing guard>" to the miss message.
  auto Note = [&](const std::string &What) {
    if (Why)
      Dec.Why += (Dec.Why.empty() ? "" : "; ") + What + ": " + *Why;
  };
  for (size_t I = 0; I < Artifacts.size(); ++I) {
    const Artifact &A = Artifacts[I];
    if (HasSelect && !A.Select.Set)
      continue;
    auto Pass = check(HasSelect ? A.Select : A.Full, D, Why);
    if (!Pass)
      return Pass.takeError();
    if (!*Pass) {
      Note(A.Name);
      continue;
    }
    // Select passed: the full set decides (safe default). On a full miss
    // the next artifacts are still tried: nothing makes select sets
    // exclusive.
    if (HasSelect && !Opts.TrustSelect) {
      auto Full = check(A.Full, D, Why);
      if (!Full)
        return Full.takeError();
      if (!*Full) {
        Note(A.Name + " (full set)");
        continue;
      }
    }
    // Not a guard of torch's (NO_TENSOR_ALIASING compares identity), a
    // condition of calling the package at all: checked under TrustSelect too.
    if (!writesDoNotOverlap(A, D, Why)) {
      Note(A.Name);
      continue;
    }
    Dec.Artifact = static_cast<int>(I);
    Dec.Why.clear();
    return Dec;
  }
  if (FallbackIndex >= 0) {
    auto Full = check(Artifacts[FallbackIndex].Full, D, Why);
    if (!Full)
      return Full.takeError();
    if (*Full && writesDoNotOverlap(Artifacts[FallbackIndex], D, Why)) {
      Dec.Artifact = FallbackIndex;
      Dec.ViaFallback = true;
      Dec.Why.clear();
      return Dec;
    }
    Note("fallback " + Artifacts[FallbackIndex].Name);
  }
  return Dec;
}

llvm::Expected<std::vector<at::Tensor>>
ServeHost::run(size_t I, const std::vector<at::Tensor> &Tensors) const {
  try {
    c10::AutoGradMode Mode(Opts.GradMode);
    return Artifacts[I].Loader->run(Tensors);
  } catch (const std::exception &E) {
    return fail(Artifacts[I].Name +
                ": AOTInductor run failed: " + exceptionMessage(E));
  }
}

llvm::Expected<std::vector<at::Tensor>>
ServeHost::serve(const std::vector<at::Tensor> &Tensors, Decision *Dec) const {
  Described D;
  if (llvm::Error E = describe(Tensors, &D))
    return E;
  auto P = pick(D);
  if (!P)
    return P.takeError();
  *Dec = std::move(*P);
  if (Dec->Artifact < 0)
    return std::vector<at::Tensor>();
  return run(static_cast<size_t>(Dec->Artifact), Tensors);
}

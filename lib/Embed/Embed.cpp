//===- Embed.cpp - The embedding API (guardjit.h) -------------------------===//
//
// guardjit.h over the IR (parse, verify) and Runtime (bind, interpret)
// libraries and a facade over lib/Check: a bound set is a check target, so a
// host gets what the Python plugin gets (first-call probation, background
// tiers, subtree skipping); lib/Check/LLVM provides the code. All LLVM and
// CPython types stay in this file.
//
//===----------------------------------------------------------------------===//
#include "guardjit/guardjit.h"

#include "guardjit/Check/CheckTarget.h"
#include "guardjit/Check/LLVMProvider.h"
#include "guardjit/Check/TierUp.h"
#include "guardjit/IR/Parser.h"
#include "guardjit/JIT/Engine.h"
#include "guardjit/JIT/ObjectCache.h"
#include "guardjit/Transforms/PassPipeline.h"
#include "guardjit/Runtime/BoundGuardSet.h"
#include "guardjit/Runtime/Interpreter.h"
#include "guardjit/Runtime/Python.h"
#include "guardjit/Runtime/TorchHooks.h"
#include "guardjit/TorchRuntime/TorchRuntime.h"

#include "llvm/Support/MemoryBuffer.h"

#include <algorithm>
#include <atomic>
#include <mutex>

#ifndef GUARDJIT_TORCH_VERSION
#error "GUARDJIT_TORCH_VERSION must name the torch this library is built for"
#endif
#ifndef GUARDJIT_VERSION
#error "GUARDJIT_VERSION must name guardjit's version"
#endif

using namespace guardjit;
using namespace guardjit::embed;

const char *guardjit::embed::torchVersion() { return GUARDJIT_TORCH_VERSION; }
const char *guardjit::embed::guardjitVersion() { return GUARDJIT_VERSION; }

namespace {

Status error(ErrorCode C, std::string Msg) { return Status(C, std::move(Msg)); }

OptLevel toOptLevel(CodeLevel L) {
  switch (L) {
  case CodeLevel::O0:
    return OptLevel::O0;
  case CodeLevel::Light:
    return OptLevel::Light;
  case CodeLevel::O1:
    return OptLevel::O1;
  case CodeLevel::O2:
    return OptLevel::O2;
  }
  return OptLevel::Light;
}

/// Whether binding `S` needs the ATen-backed hooks.
bool needsTorch(const GuardSet &S) {
  for (const Guard &G : S.guards())
    if (needsTorchHooks(G.Kind))
      return true;
  for (const Value &V : S.values())
    if (needsTorchHooks(V.Kind))
      return true;
  return false;
}

/// Counters written with the GIL held (one writer at a time) and read from
/// any thread: relaxed load + store, no read-modify-write on the hot path.
void bump(std::atomic<uint64_t> &C) {
  C.store(C.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}

/// The message of the pending Python error (cleared), or `Fallback`.
std::string takePythonError(const std::string &Fallback) {
  if (!PyErr_Occurred())
    return Fallback;
  PyObject *Type, *Value, *Tb;
  PyErr_Fetch(&Type, &Value, &Tb);
  std::string Msg = Fallback;
  if (PyObject *S = Value ? PyObject_Str(Value) : nullptr) {
    if (const char *C = PyUnicode_AsUTF8(S))
      Msg += std::string(": ") + C;
    Py_DECREF(S);
  }
  PyErr_Clear();
  Py_XDECREF(Type);
  Py_XDECREF(Value);
  Py_XDECREF(Tb);
  return Msg;
}

/// Resolves a `py:` (importable) or `lit:` (Python literal) binding name to
/// a new reference, or nullptr with *Why set. GIL held.
PyObject *resolvePythonName(const std::string &Name, std::string *Why) {
  if (Name.rfind("lit:", 0) == 0) {
    PyObject *Ast = PyImport_ImportModule("ast");
    PyObject *R = Ast ? PyObject_CallMethod(Ast, "literal_eval", "s",
                                            Name.c_str() + 4)
                      : nullptr;
    Py_XDECREF(Ast);
    if (!R)
      *Why = takePythonError("not a Python literal");
    return R;
  }
  if (Name.rfind("py:", 0) != 0) {
    *Why = "no 'py:' or 'lit:' prefix";
    return nullptr;
  }
  // The longest importable dotted prefix, then attributes.
  std::string Path = Name.substr(3);
  std::vector<std::string> Parts;
  for (size_t Start = 0;;) {
    size_t Dot = Path.find('.', Start);
    Parts.push_back(Path.substr(Start, Dot - Start));
    if (Dot == std::string::npos)
      break;
    Start = Dot + 1;
  }
  for (size_t N = Parts.size(); N > 0; --N) {
    std::string Mod = Parts[0];
    for (size_t K = 1; K < N; ++K)
      Mod += "." + Parts[K];
    PyObject *Obj = PyImport_ImportModule(Mod.c_str());
    if (!Obj) {
      PyErr_Clear();
      continue;
    }
    for (size_t K = N; Obj && K < Parts.size(); ++K) {
      PyObject *Next = PyObject_GetAttrString(Obj, Parts[K].c_str());
      Py_DECREF(Obj);
      Obj = Next;
    }
    if (!Obj)
      *Why = takePythonError("attribute lookup failed");
    return Obj;
  }
  *Why = "no importable module in '" + Path + "'";
  return nullptr;
}

} // namespace

//===----------------------------------------------------------------------===//
// Runtime
//===----------------------------------------------------------------------===//

struct Runtime::Impl {
  RuntimeOptions Opts;
  JITOptions JO; ///< of the first engine; other levels differ in Level only
  std::mutex Lock; ///< guards Providers
  /// One engine per code level, made when first asked for (the background
  /// tier's level); shared by the code they made.
  std::shared_ptr<CodeProvider> Providers[4];

  /// The provider of `Level` (OptLevel as int), or null when LLVM cannot
  /// make its engine. Any thread, no GIL.
  std::shared_ptr<CodeProvider> provider(int Level) {
    std::lock_guard<std::mutex> G(Lock);
    std::shared_ptr<CodeProvider> &P = Providers[Level];
    if (!P) {
      JITOptions O = JO;
      O.Level = static_cast<OptLevel>(Level);
      auto J = GuardJIT::create(O);
      if (!J) {
        llvm::consumeError(J.takeError());
        return nullptr;
      }
      P = makeLLVMProvider(std::shared_ptr<GuardJIT>(std::move(*J)));
    }
    return P;
  }
};

Runtime::Runtime(std::shared_ptr<Impl> I) : I(std::move(I)) {}
Runtime::~Runtime() = default;

Status Runtime::create(const RuntimeOptions &Opts,
                       std::unique_ptr<Runtime> *Out) {
  if (!Out)
    return error(ErrorCode::InvalidArgument, "Out is null");
  if (!Py_IsInitialized())
    return error(ErrorCode::InvalidArgument,
                 "CPython is not initialized (call Py_Initialize first)");
  if (Opts.EnableTorch) {
    // installTorchRuntime reads torch's Python classes: torch must be
    // imported in this interpreter already.
    PyObject *Name = PyUnicode_FromString("torch");
    PyObject *Torch = Name ? PyImport_GetModule(Name) : nullptr;
    Py_XDECREF(Name);
    if (!Torch) {
      PyErr_Clear();
      return error(ErrorCode::Unsupported,
                   "EnableTorch needs `import torch` done first");
    }
    Py_DECREF(Torch);
    installTorchRuntime();
  }
  JITOptions JO;
  JO.Level = toOptLevel(Opts.Level);
  // The object cache: the option, else GUARDJIT_CACHE_DIR; "off" for none.
  JO.CacheDir = Opts.CacheDir.empty() ? cacheDirFromEnvironment()
                : Opts.CacheDir == "off" ? std::string()
                                         : Opts.CacheDir;
  if (!JO.CacheDir.empty()) {
    JO.HostVersions = "python=" + std::to_string(PY_VERSION_HEX);
    PyObject *Name = PyUnicode_FromString("torch");
    if (PyObject *Torch = Name ? PyImport_GetModule(Name) : nullptr) {
      if (PyObject *V = PyObject_GetAttrString(Torch, "__version__")) {
        if (const char *Text = PyUnicode_AsUTF8(V))
          JO.HostVersions += std::string(" torch=") + Text;
        Py_DECREF(V);
      }
      Py_DECREF(Torch);
    }
    Py_XDECREF(Name);
    PyErr_Clear();
  }
  auto J = GuardJIT::create(JO);
  if (!J)
    return error(ErrorCode::Internal,
                 "cannot create the LLVM JIT: " + llvm::toString(J.takeError()));
  auto I = std::make_shared<Impl>();
  I->Opts = Opts;
  I->JO = JO;
  I->Providers[static_cast<int>(JO.Level)] =
      makeLLVMProvider(std::shared_ptr<GuardJIT>(std::move(*J)));
  Out->reset(new Runtime(std::move(I)));
  return Status::success();
}

//===----------------------------------------------------------------------===//
// LoadedSet
//===----------------------------------------------------------------------===//

struct LoadedSet::Impl {
  std::shared_ptr<Runtime::Impl> RT;
  std::shared_ptr<GuardSet> Set; ///< addresses filled in by bind
  std::vector<ObjectInfo> Infos;
  std::vector<std::string> ArgNames;
  std::vector<PyObject *> Refs; ///< guardjit's reference to each object
  /// The check (lib/Check), made by bind: the bound set, its code, its
  /// subtree skipping. Destroyed with the GIL (it holds references).
  std::shared_ptr<CheckTarget> Target;
  /// Guards the Target pointer against evict() for the calls that run
  /// without the GIL (compile, waitForCode, stats). Lock order: the GIL
  /// first, then TargetLock, then CompileLock.
  mutable std::mutex TargetLock;
  std::mutex CompileLock; ///< serializes compile() and enableSubtreeSkip()
  bool CompileStarted = false; ///< guarded by CompileLock
  std::atomic<uint64_t> Checks{0}, Hits{0};
  std::atomic<bool> Evicted{false};

  Status ready() const {
    if (Evicted.load())
      return error(ErrorCode::Evicted, "guard set '" + Set->name() +
                                           "' was evicted");
    if (!Target)
      return error(ErrorCode::Unbound,
                   "guard set '" + Set->name() + "' is not bound");
    return Status::success();
  }
  Status finishBind(std::vector<PyObject *> Objects);
  /// The level background compiles end at: TierUpLevel when above Level.
  int topLevel() const {
    return std::max(static_cast<int>(toOptLevel(RT->Opts.Level)),
                    static_cast<int>(toOptLevel(RT->Opts.TierUpLevel)));
  }
  ProviderLookup providers() const {
    std::shared_ptr<Runtime::Impl> R = RT;
    return [R](int Level) { return R->provider(Level); };
  }
};

LoadedSet::LoadedSet(std::unique_ptr<Impl> I) : I(std::move(I)) {}
LoadedSet::~LoadedSet() { evict(); }

const std::string &LoadedSet::name() const { return I->Set->name(); }
const std::vector<ObjectInfo> &LoadedSet::objects() const { return I->Infos; }
const std::vector<std::string> &LoadedSet::argumentNames() const {
  return I->ArgNames;
}
bool LoadedSet::evicted() const { return I->Evicted.load(); }

Status Runtime::load(std::string_view GirText, const LoadOptions &Opts,
                     std::vector<std::unique_ptr<LoadedSet>> *Out) {
  if (!Out)
    return error(ErrorCode::InvalidArgument, "Out is null");
  // 1. Parse and verify (located diagnostics).
  std::optional<GirHeader> Header;
  auto Sets = parseGirString(llvm::StringRef(GirText.data(), GirText.size()),
                             Opts.BufferName, &Header);
  if (!Sets)
    return error(ErrorCode::ParseError, llvm::toString(Sets.takeError()));
  // 2. The versions it was recorded with.
  if (!Opts.AllowVersionMismatch) {
    if (!Header)
      return error(ErrorCode::VersionMismatch,
                   Opts.BufferName +
                       ": no 'gir torch=\"..\" guardjit=\"..\"' header: the "
                       "torch the set was recorded with is unknown (set "
                       "LoadOptions::AllowVersionMismatch to load it anyway)");
    if (Header->Torch != torchVersion())
      return error(ErrorCode::VersionMismatch,
                   Opts.BufferName + ": recorded with torch " + Header->Torch +
                       ", this guardjit checks torch " + torchVersion() +
                       "'s guards (set LoadOptions::AllowVersionMismatch to "
                       "load it anyway)");
    if (Header->Guardjit != guardjitVersion())
      return error(ErrorCode::VersionMismatch,
                   Opts.BufferName + ": recorded with guardjit " +
                       Header->Guardjit + ", this is guardjit " +
                       guardjitVersion() +
                       " (set LoadOptions::AllowVersionMismatch to load it "
                       "anyway)");
  }
  // 3. The host's passes.
  if (!Opts.Passes.empty()) {
    auto P = PassPipeline::parse(Opts.Passes);
    if (!P)
      return error(ErrorCode::InvalidArgument,
                   "bad pass pipeline '" + Opts.Passes +
                       "': " + llvm::toString(P.takeError()));
    for (GuardSet &S : *Sets)
      if (llvm::Error E = P->run(S, PassContext()))
        return error(ErrorCode::InvalidArgument,
                     "pass pipeline on '" + S.name() +
                         "': " + llvm::toString(std::move(E)));
  }
  // 4. One unbound LoadedSet per set.
  for (GuardSet &S : *Sets) {
    auto Impl = std::make_unique<LoadedSet::Impl>();
    Impl->RT = I;
    Impl->Set = std::make_shared<GuardSet>(std::move(S));
    const GuardSet &G = *Impl->Set;
    for (uint32_t K = 0; K < G.objects().size(); ++K) {
      const ObjectEntry &E = G.object(K);
      Impl->Infos.push_back({K, spelling(E.Kind), E.Repr, E.Name});
    }
    // Frame locals the set reads, by index (checkArgs' order).
    std::vector<std::pair<int64_t, std::string>> Locals;
    for (const Value &V : G.values())
      if (V.Kind == AccessorKind::FrameLocal && V.Parent == GuardSet::root())
        Locals.push_back({V.Index, V.Name});
    std::sort(Locals.begin(), Locals.end());
    Locals.erase(std::unique(Locals.begin(), Locals.end()), Locals.end());
    for (auto &L : Locals)
      Impl->ArgNames.push_back(L.second);
    Out->push_back(std::unique_ptr<LoadedSet>(new LoadedSet(std::move(Impl))));
  }
  return Status::success();
}

Status Runtime::loadFile(const std::string &Path, LoadOptions Opts,
                         std::vector<std::unique_ptr<LoadedSet>> *Out) {
  auto Buf = llvm::MemoryBuffer::getFile(Path, /*IsText=*/true);
  if (!Buf)
    return error(ErrorCode::InvalidArgument,
                 "cannot read '" + Path + "': " + Buf.getError().message());
  if (Opts.BufferName == LoadOptions().BufferName)
    Opts.BufferName = Path;
  llvm::StringRef Text = (*Buf)->getBuffer();
  return load(std::string_view(Text.data(), Text.size()), Opts, Out);
}

Status LoadedSet::Impl::finishBind(std::vector<PyObject *> Objects) {
  // Objects holds new references; from here on they are ours.
  for (size_t K = 0; K < Objects.size(); ++K)
    Set->objects()[K].Address = reinterpret_cast<uintptr_t>(Objects[K]);
  if (needsTorch(*Set) && !torchHooks()) {
    for (PyObject *O : Objects)
      Py_DECREF(O);
    for (ObjectEntry &E : Set->objects())
      E.Address = 0;
    return error(ErrorCode::Unsupported,
                 "guard set '" + Set->name() +
                     "' has torch guards: create the Runtime with "
                     "EnableTorch after `import torch`");
  }
  std::string Why;
  std::unique_ptr<BoundGuardSet> B = BoundGuardSet::bind(Set, &Why);
  if (!B) {
    for (PyObject *O : Objects)
      Py_DECREF(O);
    for (ObjectEntry &E : Set->objects())
      E.Address = 0;
    return error(ErrorCode::InvalidArgument,
                 "cannot bind guard set '" + Set->name() + "': " + Why);
  }
  Refs = std::move(Objects);
  Target = makeCheckTarget(std::move(B), nullptr, /*VerifyFirstCall=*/false);
  return Status::success();
}

Status LoadedSet::bind(const BindCallback &Callback) {
  if (I->Evicted.load())
    return I->ready();
  if (I->Target)
    return error(ErrorCode::InvalidArgument,
                 "guard set '" + name() + "' is bound already");
  if (!Callback)
    return error(ErrorCode::InvalidArgument, "the bind callback is empty");
  std::vector<PyObject *> Objects;
  for (const ObjectInfo &Info : I->Infos) {
    auto *O = static_cast<PyObject *>(Callback(Info));
    if (!O) {
      for (PyObject *P : Objects)
        Py_DECREF(P);
      return error(ErrorCode::Unbound,
                   "guard set '" + name() + "': object #" +
                       std::to_string(Info.Index) + " (" +
                       std::string(Info.Kind) + " " + std::string(Info.Repr) +
                       ") is unbound");
    }
    Py_INCREF(O);
    Objects.push_back(O);
  }
  return I->finishBind(std::move(Objects));
}

Status LoadedSet::bindByName(const std::map<std::string, void *> &Map,
                             bool ResolvePython) {
  if (I->Evicted.load())
    return I->ready();
  if (I->Target)
    return error(ErrorCode::InvalidArgument,
                 "guard set '" + name() + "' is bound already");
  std::vector<PyObject *> Objects;
  auto Fail = [&](Status S) {
    for (PyObject *P : Objects)
      Py_DECREF(P);
    return S;
  };
  for (const ObjectInfo &Info : I->Infos) {
    std::string Name(Info.Name);
    std::string What = "guard set '" + name() + "': object #" +
                       std::to_string(Info.Index) + " (" +
                       std::string(Info.Kind) + " " + std::string(Info.Repr) +
                       ")";
    if (Name.empty())
      return Fail(error(ErrorCode::Unbound, What + " has no name= to bind by"));
    auto It = Map.find(Name);
    if (It != Map.end() && It->second) {
      auto *O = static_cast<PyObject *>(It->second);
      Py_INCREF(O);
      Objects.push_back(O);
      continue;
    }
    std::string Why = "not in the host's map";
    if (ResolvePython && (Name.rfind("py:", 0) == 0 || Name.rfind("lit:", 0) == 0))
      if (PyObject *O = resolvePythonName(Name, &Why)) {
        Objects.push_back(O);
        continue;
      }
    return Fail(error(ErrorCode::Unbound,
                      What + " named '" + Name + "' is unbound: " + Why));
  }
  return I->finishBind(std::move(Objects));
}

Status LoadedSet::compile(bool Background) {
  std::lock_guard<std::mutex> TargetLock(I->TargetLock);
  if (Status S = I->ready(); !S)
    return S;
  CheckTarget &T = *I->Target;
  std::lock_guard<std::mutex> Lock(I->CompileLock);
  if (I->CompileStarted)
    return Status::success(); // compiled or on its way
  int Level = static_cast<int>(toOptLevel(I->RT->Opts.Level));
  if (Background) {
    // 1. The first code, then the tier-up level, on lib/Check's thread;
    //    check() runs the interpreter meanwhile.
    int Top = I->topLevel();
    if (!startNative(I->Target, Level, Top > Level ? Top : -1,
                     I->providers(), /*HoldsGil=*/false))
      return error(ErrorCode::CompileFailed,
                   "guard set '" + name() +
                       "': the background compile could not be queued");
  } else {
    // 1. The code at Level, here.
    std::shared_ptr<CodeProvider> P = I->RT->provider(Level);
    if (!P)
      return error(ErrorCode::Internal, "cannot create the LLVM JIT");
    std::string Why;
    std::shared_ptr<CheckCode> Code = P->compile(*T.Bound, &Why);
    if (!Code)
      return error(ErrorCode::CompileFailed,
                   "guard set '" + name() + "': JIT compilation failed: " +
                       Why);
    installCode(T, std::move(Code), /*Verify=*/true);
  }
  I->CompileStarted = true;
  // 2. The residual check of subtree skipping, in the background: skipping
  //    starts once it is native.
  compileResidual(T, I->topLevel(), I->providers(), /*HoldsGil=*/false);
  return Status::success();
}

Status LoadedSet::waitForCode() {
  // Held while waiting: evict() (which waits for the same compiles) must not
  // free the target meanwhile, and this thread must not be left holding the
  // last reference (the target's references need the GIL to go).
  std::lock_guard<std::mutex> TargetLock(I->TargetLock);
  CheckTarget *T = I->Target.get();
  if (!T)
    return Status::success();
  waitTarget(*T, -1);
  if (T->Skip) {
    waitTarget(*T->Skip->Residual, -1);
    if (T->Skip->Prelude)
      waitTarget(*T->Skip->Prelude, -1);
  }
  std::string Why = targetCompileError(*T);
  if (!Why.empty())
    return error(ErrorCode::CompileFailed,
                 "guard set '" + name() + "': JIT compilation failed: " + Why);
  return Status::success();
}

Status LoadedSet::enableSubtreeSkip(void *FrameLocals, bool CostModel) {
  if (Status S = I->ready(); !S)
    return S;
  if (!FrameLocals || !PyDict_Check(static_cast<PyObject *>(FrameLocals)))
    return error(ErrorCode::InvalidArgument,
                 "enableSubtreeSkip takes the frame locals as a dict");
  std::lock_guard<std::mutex> Lock(I->CompileLock);
  std::string WhyNot = guardjit::enableSubtreeSkip(
      *I->Target, static_cast<PyObject *>(FrameLocals), CostModel);
  if (!WhyNot.empty())
    return error(ErrorCode::Unsupported,
                 "guard set '" + name() + "' cannot skip subtrees: " + WhyNot);
  if (I->CompileStarted)
    compileResidual(*I->Target, I->topLevel(), I->providers());
  return Status::success();
}

Status LoadedSet::check(void *FrameLocals, bool *Pass) {
  if (Status S = I->ready(); !S)
    return S;
  if (!Pass || !FrameLocals)
    return error(ErrorCode::InvalidArgument, "null argument to check");
  auto *D = static_cast<PyObject *>(FrameLocals);
  if (!PyDict_Check(D))
    return error(ErrorCode::InvalidArgument,
                 "check takes the frame locals as a dict");
  bool R = callCheck(*I->Target, D) != 0;
  bump(I->Checks);
  if (R)
    bump(I->Hits);
  *Pass = R;
  return Status::success();
}

Status LoadedSet::checkArgs(void *const *Args, size_t NumArgs, bool *Pass) {
  if (Status S = I->ready(); !S)
    return S;
  if (NumArgs != I->ArgNames.size())
    return error(ErrorCode::InvalidArgument,
                 "guard set '" + name() + "' takes " +
                     std::to_string(I->ArgNames.size()) + " argument(s), got " +
                     std::to_string(NumArgs));
  if (NumArgs && !Args)
    return error(ErrorCode::InvalidArgument, "null argument array");
  PyObject *D = PyDict_New();
  if (!D)
    return error(ErrorCode::Internal, takePythonError("cannot build a dict"));
  for (size_t K = 0; K < NumArgs; ++K) {
    if (!Args[K] ||
        PyDict_SetItemString(D, I->ArgNames[K].c_str(),
                             static_cast<PyObject *>(Args[K])) != 0) {
      Py_DECREF(D);
      return error(ErrorCode::InvalidArgument,
                   takePythonError("argument '" + I->ArgNames[K] +
                                   "' is null or cannot be stored"));
    }
  }
  Status S = check(D, Pass);
  Py_DECREF(D);
  return S;
}

Status LoadedSet::explain(void *FrameLocals, std::string *Where) {
  if (Status S = I->ready(); !S)
    return S;
  if (!Where || !FrameLocals ||
      !PyDict_Check(static_cast<PyObject *>(FrameLocals)))
    return error(ErrorCode::InvalidArgument,
                 "explain takes the frame locals as a dict");
  *Where = explainFailure(*I->Target->Bound,
                          static_cast<PyObject *>(FrameLocals));
  return Status::success();
}

SetStats LoadedSet::stats() const {
  SetStats S;
  S.Guards = I->Set->guards().size();
  S.Objects = I->Set->objects().size();
  S.Checks = I->Checks.load(std::memory_order_relaxed);
  S.Hits = I->Hits.load(std::memory_order_relaxed);
  S.Misses = S.Checks - S.Hits;
  // The probation and subtree-skip counters are written by check() under
  // the GIL: read them under it too (taken here when this thread lacks it;
  // before TargetLock, the order evict() takes them in).
  if (!Py_IsInitialized())
    return S;
  PyGILState_STATE Gil = PyGILState_Ensure();
  std::lock_guard<std::mutex> TargetLock(I->TargetLock);
  CheckTarget *T = I->Target.get();
  if (!T) {
    PyGILState_Release(Gil);
    return S;
  }
  S.Native = T->Fn.load(std::memory_order_acquire) != nullptr;
  S.Distrusted = T->Distrusted.load();
  S.Probations = T->Probations;
  {
    std::lock_guard<std::mutex> Lock(T->CodeLock);
    if (T->Native) {
      CodeStats C = T->Native->stats();
      S.CompileMs = C.LowerMs + C.CompileMs;
      S.InlinedGuards = C.NumInlined;
      S.HelperGuards = C.NumHelpers;
      if (S.Native)
        S.Level = static_cast<CodeLevel>(T->Native->level());
    }
  }
  if (T->Skip) {
    const SkipState &K = *T->Skip;
    S.SubtreeSkip = !K.Disabled;
    S.SkipHits = K.Plan->stats().Hits;
    S.SkipFallbacks = K.Plan->stats().Fallbacks;
    S.ResidualNative = K.Residual->Fn.load() != nullptr;
  }
  PyGILState_Release(Gil);
  return S;
}

void LoadedSet::evict() {
  if (I->Evicted.exchange(true))
    return;
  if (!I->Target)
    return;
  // 1. No compile may still read the bound set. The wait needs no GIL (the
  //    compile thread never takes it): other threads run meanwhile, and
  //    their calls of this set already answer Evicted.
  Py_BEGIN_ALLOW_THREADS
  waitTarget(*I->Target, -1);
  if (I->Target->Skip) {
    waitTarget(*I->Target->Skip->Residual, -1);
    if (I->Target->Skip->Prelude)
      waitTarget(*I->Target->Skip->Prelude, -1);
  }
  Py_END_ALLOW_THREADS
  // 2. The background thread's references to the target go now (GIL held),
  //    then ours: the code first (it bakes in the bound addresses), then
  //    the bound set's references (CheckTarget's member order).
  drainTierUp();
  std::lock_guard<std::mutex> TargetLock(I->TargetLock);
  I->Target.reset();
  for (PyObject *O : I->Refs)
    Py_DECREF(O);
  I->Refs.clear();
  for (ObjectEntry &E : I->Set->objects())
    E.Address = 0;
}

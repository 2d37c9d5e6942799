//===- BenchSupport.cpp - Shared pieces of the micro-benchmarks -----------===//
#include "BenchSupport.h"

#include "guardjit/IR/Parser.h"
#include "guardjit/JIT/ObjectCache.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include "benchmark/benchmark.h"
#include "llvm/Support/Error.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace guardjit::bench {

namespace {
[[noreturn]] void die(const std::string &Msg) {
  if (PyErr_Occurred())
    PyErr_Print();
  std::fprintf(stderr, "guardjit-microbench: %s\n", Msg.c_str());
  std::exit(1);
}

PyObject *ns() {
  static PyObject *D = [] {
    PyObject *X = PyDict_New();
    PyDict_SetItemString(X, "__builtins__", PyEval_GetBuiltins());
    return X;
  }();
  return D;
}

/// Objects the guard sets point at without owning them.
std::vector<PyObject *> &kept() {
  static std::vector<PyObject *> K;
  return K;
}

std::vector<std::unique_ptr<Case>> &cases() {
  static std::vector<std::unique_ptr<Case>> C;
  return C;
}
} // namespace

void exec(const char *Src) {
  PyObject *R = PyRun_String(Src, Py_file_input, ns(), ns());
  if (!R)
    die(std::string("exec failed:\n") + Src);
  Py_DECREF(R);
}

PyObject *eval(const std::string &Expr) {
  PyObject *R = PyRun_String(Expr.c_str(), Py_eval_input, ns(), ns());
  if (!R)
    die("eval failed: " + Expr);
  return R;
}

SetBuilder::SetBuilder() : S(std::make_shared<GuardSet>("bench")) {}

ObjectId SetBuilder::object(PyObject *O, ObjectKind K, bool Strong) {
  ObjectEntry E;
  E.Kind = K;
  E.Strong = Strong;
  E.Address = reinterpret_cast<uintptr_t>(O);
  E.Repr = Py_TYPE(O)->tp_name;
  kept().push_back(Py_NewRef(O));
  return S->addObject(std::move(E));
}

ObjectId SetBuilder::str(const char *Text) {
  PyObject *R = PyUnicode_InternFromString(Text);
  ObjectId Id = object(R, ObjectKind::Key);
  Py_DECREF(R);
  return Id;
}

ValueId SetBuilder::local(const char *Name) {
  Value V;
  V.Kind = AccessorKind::FrameLocal;
  V.Parent = GuardSet::root();
  V.Name = Name;
  V.Key = str(Name);
  V.Source = std::string("L['") + Name + "']";
  return S->getOrAddValue(std::move(V));
}

ValueId SetBuilder::item(ValueId Parent, int64_t Index) {
  Value V;
  V.Kind = AccessorKind::TupleGetItem;
  V.Parent = Parent;
  V.Index = Index;
  V.Source = S->value(Parent).Source + "[" + std::to_string(Index) + "]";
  return S->getOrAddValue(std::move(V));
}

ValueId SetBuilder::keyed(AccessorKind K, ValueId Parent, const char *Name) {
  Value V;
  V.Kind = K;
  V.Parent = Parent;
  V.Name = Name;
  V.Key = str(Name);
  V.Source = S->value(Parent).Source + "." + Name;
  return S->getOrAddValue(std::move(V));
}

ValueId SetBuilder::unary(AccessorKind K, ValueId Parent) {
  Value V;
  V.Kind = K;
  V.Parent = Parent;
  V.Source = std::string(spelling(K)) + "(" + S->value(Parent).Source + ")";
  return S->getOrAddValue(std::move(V));
}

Guard &SetBuilder::guard(GuardKind K, std::vector<ValueId> Ops, ObjectId Obj,
                         int64_t Int) {
  Guard G;
  G.Kind = K;
  G.Operands = std::move(Ops);
  G.Object = Obj;
  G.Int = Int;
  G.Attrs.Source = G.Operands.empty() ? "" : S->value(G.Operands[0]).Source;
  S->addGuard(std::move(G));
  return S->guards().back();
}

GuardJIT &engine() {
  static std::unique_ptr<GuardJIT> J = [] {
    // GUARDJIT_BENCH_LEVEL=O0|light|O1|O2 (default light).
    OptLevel L = OptLevel::Light;
    if (const char *Env = std::getenv("GUARDJIT_BENCH_LEVEL")) {
      std::string V = Env;
      L = V == "O0"   ? OptLevel::O0
          : V == "O1" ? OptLevel::O1
          : V == "O2" ? OptLevel::O2
                      : OptLevel::Light;
    }
    JITOptions O;
    O.Level = L;
    O.VerifyIR = true;
    // GUARDJIT_CACHE_DIR set: the cases run relocatable code, as a process
    // with the object cache does (docs/object-cache.md).
    O.CacheDir = cacheDirFromEnvironment();
    auto E = GuardJIT::create(O);
    if (!E)
      die("cannot create the JIT: " + llvm::toString(E.takeError()));
    return std::move(*E);
  }();
  return *J;
}

PyObject *const *tupleItems(PyObject *FrameLocals) {
  static PyObject *Key = PyUnicode_InternFromString("t");
  PyObject *T = PyDict_GetItem(FrameLocals, Key);
  if (!T || !PyTuple_Check(T) || PyTuple_GET_SIZE(T) < N)
    return nullptr;
  return &PyTuple_GET_ITEM(T, 0);
}

namespace {
void setCounters(benchmark::State &St, int Guards) {
  // Time per check / Guards, in ns: kIsIterationInvariantRate gives
  // value * iterations / seconds, kInvert its inverse.
  St.counters["ns_per_guard"] = benchmark::Counter(
      Guards * 1e-9, benchmark::Counter::kIsIterationInvariantRate |
                         benchmark::Counter::kInvert);
}
} // namespace

void registerCase(const std::string &Name, SetBuilder &SB,
                  PyObject *FrameLocals, FloorFn Floor, int Guards) {
  auto C = std::make_unique<Case>();
  C->Name = Name;
  C->FrameLocals = FrameLocals;
  C->Floor = std::move(Floor);
  C->Guards = Guards;
  std::string Error;
  C->Bound = BoundGuardSet::bind(SB.S, &Error);
  if (!C->Bound)
    die(Name + ": bind: " + Error);
  auto Compiled = engine().compile(*C->Bound);
  if (!Compiled)
    die(Name + ": compile: " + llvm::toString(Compiled.takeError()));
  C->Native = std::move(*Compiled);
  CheckFn Fn = C->Native->function();
  if (!interpret(*C->Bound, FrameLocals) || Fn(FrameLocals) != 1 ||
      C->Floor(FrameLocals) != 1 || PyErr_Occurred())
    die(Name + ": a check fails on its own frame locals (interpreter " +
        std::to_string(interpret(*C->Bound, FrameLocals)) + ", native " +
        std::to_string(Fn(FrameLocals)) + ", floor " +
        std::to_string(C->Floor(FrameLocals)) + ")");
  Case *P = C.get();
  cases().push_back(std::move(C));

  benchmark::RegisterBenchmark((Name + "/native").c_str(),
                               [P, Fn](benchmark::State &St) {
                                 for (auto _ : St)
                                   benchmark::DoNotOptimize(Fn(P->FrameLocals));
                                 setCounters(St, P->Guards);
                               });
  benchmark::RegisterBenchmark(
      (Name + "/interpreter").c_str(), [P](benchmark::State &St) {
        for (auto _ : St)
          benchmark::DoNotOptimize(interpret(*P->Bound, P->FrameLocals));
        setCounters(St, P->Guards);
      });
  benchmark::RegisterBenchmark((Name + "/floor").c_str(),
                               [P](benchmark::State &St) {
                                 for (auto _ : St)
                                   benchmark::DoNotOptimize(
                                       P->Floor(P->FrameLocals));
                                 setCounters(St, P->Guards);
                               });
}

#ifndef GUARDJIT_CORPUS_DIR
#define GUARDJIT_CORPUS_DIR "tests/corpus/torch-2.13.0"
#endif

std::vector<CorpusSet> corpusSets() {
  std::vector<CorpusSet> Out;
  std::string Dir = GUARDJIT_CORPUS_DIR;
  if (const char *E = std::getenv("GUARDJIT_CORPUS_DIR"))
    Dir = E;
  PyObject *Tensor = eval("torch.Tensor");
  PyObject *Param = eval("torch.nn.Parameter");
  std::error_code EC;
  std::vector<std::string> Files;
  for (llvm::sys::fs::directory_iterator It(Dir, EC), End; It != End && !EC;
       It.increment(EC))
    if (llvm::StringRef(It->path()).ends_with(".gir"))
      Files.push_back(It->path());
  std::sort(Files.begin(), Files.end());
  for (const std::string &File : Files) {
    auto Buf = llvm::MemoryBuffer::getFile(File);
    if (!Buf)
      continue;
    auto Sets = parseGirString((*Buf)->getBuffer(), File);
    if (!Sets) {
      std::fprintf(stderr, "%s: %s\n", File.c_str(),
                   toString(Sets.takeError()).c_str());
      continue;
    }
    int N = 0;
    for (GuardSet &S : *Sets) {
      auto Shared = std::make_shared<GuardSet>(std::move(S));
      for (ObjectEntry &O : Shared->objects()) {
        PyObject *Stand;
        if (O.Kind == ObjectKind::Type)
          Stand = O.Repr.find("Parameter") != std::string::npos ? Param
                  : O.Repr.find("Tensor") != std::string::npos  ? Tensor
                                                                 : eval("int");
        else if (O.Kind == ObjectKind::Dict)
          Stand = PyDict_New();
        else if (O.Kind == ObjectKind::Key)
          // Attribute names must be str; the repr is the quoted name.
          Stand = PyUnicode_FromString(
              llvm::StringRef(O.Repr).trim("'\"").str().c_str());
        else
          Stand = eval("object()");
        O.Address = reinterpret_cast<uintptr_t>(Stand); // kept for good
      }
      // Objects whose binding checks their shape.
      for (const Guard &G : Shared->guards()) {
        auto Set = [&](ObjectId Id, const char *Expr) {
          if (Id < Shared->objects().size())
            Shared->objects()[Id].Address =
                reinterpret_cast<uintptr_t>(eval(Expr));
        };
        if (G.Kind == GuardKind::DimensionMarking)
          Set(G.Object, "({}, (), {})");
        else if (G.Kind == GuardKind::TorchFunctionModeStack)
          Set(G.Object, "()");
        else if (G.Kind == GuardKind::DefaultDevice)
          Set(G.Aux, "{}");
        else if (G.Kind == GuardKind::ShapeExpr ||
                 G.Kind == GuardKind::Lambda ||
                 G.Kind == GuardKind::EpilogueLambda)
          Set(G.Object, "lambda *a: True");
      }
      std::string Name = llvm::sys::path::stem(File).str() +
                         (N ? "." + std::to_string(N) : "");
      ++N;
      Out.push_back({std::move(Name), std::move(Shared)});
    }
  }
  return Out;
}

} // namespace guardjit::bench

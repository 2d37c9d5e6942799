//===- ObjectCacheTest.cpp - The on-disk object cache ---------------------===//
//
// A hit gives the same answers as the compile it replaces and as the
// interpreter; files that are not a valid entry of their key (corrupt,
// truncated, foreign, unlinkable) and directories that cannot be used are
// misses, never crashes; concurrent writers of one key are safe. The
// cross-process test is tests/python/test_object_cache.py.
//
//===----------------------------------------------------------------------===//
#include "JITTestSupport.h"

#include "guardjit/JIT/Engine.h"
#include "guardjit/JIT/Lowering.h"
#include "guardjit/JIT/ObjectCache.h"
#include "guardjit/Runtime/Interpreter.h"

#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Module.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

using namespace guardjit;
using namespace guardjit::test;

namespace {

PyObject *ns() {
  static PyObject *NS = runPrelude("class C:\n  pass\n");
  return NS;
}

Ref eval(const char *Expr) {
  PyObject *R = PyRun_String(Expr, Py_eval_input, ns(), ns());
  if (!R)
    PyErr_Print();
  EXPECT_NE(R, nullptr) << Expr;
  return Ref(R);
}

/// One guard of each kind of table slot the tests can bind without torch:
/// objects, value memos (dict reads), guard memos (DICT_CONTAINS), and at O0
/// the runs over contiguous descriptors (two DICT_CONTAINS of d, the reads
/// d[k] and d.values()[0] with their fused guards).
std::shared_ptr<GuardSet> buildSet(SetBuilder &SB, const char *Key = "k") {
  Ref IntType = eval("int");
  Ref FloatType = eval("float");
  Ref Const = eval("3.5");
  ValueId X = SB.local("x");
  SB.guard(GuardKind::TypeMatch, {X}, SB.object(IntType.get(), ObjectKind::Type));
  SB.guard(GuardKind::NotNone, {SB.keyed(AccessorKind::GetAttr, X, "real")});
  ValueId D = SB.local("d");
  SB.guard(GuardKind::DictContains, {D}, SB.str(Key), /*Int=*/1);
  SB.guard(GuardKind::DictContains, {D}, SB.str("m"), /*Int=*/0);
  ValueId K = SB.keyed(AccessorKind::DictGetItem, D, Key);
  SB.guard(GuardKind::EqualsMatch, {K},
           SB.object(Const.get(), ObjectKind::Constant, true));
  SB.guard(GuardKind::TypeMatch, {SB.indexed(AccessorKind::DictValue, D, 0)},
           SB.object(FloatType.get(), ObjectKind::Type));
  return SB.S;
}

const char *const Inputs[] = {
    "{'x': 5, 'd': {'k': 3.5}}",       // passes
    "{'x': 5, 'd': {'k': 3.5, 'j': 1}}", // passes
    "{'x': 'a', 'd': {'k': 3.5}}",     // TYPE_MATCH fails
    "{'x': 5, 'd': {'k': 4.0}}",       // EQUALS_MATCH fails
    "{'x': 5, 'd': {}}",               // DICT_CONTAINS fails
    "{'x': 5}",                        // no d
};

/// The native answers equal the interpreter's on every input; at least one
/// passes and one fails.
void expectAgrees(const BoundGuardSet &BS, CheckFn Fn) {
  int Passed = 0;
  for (int Round = 0; Round < 2; ++Round) // second round: memos filled
    for (const char *In : Inputs) {
      Ref L = eval(In);
      bool Interp = interpret(BS, L.get());
      bool Native = Fn(L.get()) != 0;
      EXPECT_EQ(Native, Interp) << In;
      EXPECT_FALSE(PyErr_Occurred()) << In;
      PyErr_Clear();
      Passed += Native;
    }
  EXPECT_EQ(Passed, 4);
}

class ObjectCacheTest : public ::testing::Test {
protected:
  void SetUp() override {
    ns();
    char Tmpl[] = "/tmp/gj-objcache-test-XXXXXX";
    ASSERT_NE(mkdtemp(Tmpl), nullptr);
    Root = Tmpl;
    Dir = Root + "/cache";
  }
  void TearDown() override {
    chmod(Dir.c_str(), 0700);
    llvm::sys::fs::remove_directories(Root);
  }

  std::unique_ptr<GuardJIT> engine(OptLevel L = OptLevel::Light,
                                   std::string CacheDir = "") {
    JITOptions O;
    O.Level = L;
    O.VerifyIR = true;
    O.CacheDir = CacheDir.empty() ? Dir : CacheDir;
    O.HostVersions = "test";
    auto E = GuardJIT::create(O);
    EXPECT_TRUE(!!E) << toString(E.takeError());
    return E ? std::move(*E) : nullptr;
  }

  /// The one cache file in Dir ("" if none or several).
  std::string onlyFile() {
    std::string Found;
    int N = 0;
    std::error_code EC;
    for (llvm::sys::fs::directory_iterator It(Dir, EC), End; It != End && !EC;
         It.increment(EC))
      if (llvm::StringRef(It->path()).ends_with(".o")) {
        Found = It->path();
        ++N;
      }
    return N == 1 ? Found : "";
  }

  std::string Root, Dir;
};

TEST_F(ObjectCacheTest, HitAfterMissIsTheSameCorrectFunction) {
  for (OptLevel L : {OptLevel::O0, OptLevel::Light, OptLevel::O2}) {
    SCOPED_TRACE(int(L));
    llvm::sys::fs::remove_directories(Dir);
    auto JIT = engine(L);
    ASSERT_TRUE(JIT);
    ASSERT_FALSE(JIT->cacheInfo().Dir.empty()) << JIT->cacheInfo().Status;
    SetBuilder SB;
    buildSet(SB);
    auto BS = SB.bind();
    ASSERT_TRUE(BS);

    auto Miss = JIT->compile(*BS);
    ASSERT_TRUE(!!Miss) << toString(Miss.takeError());
    EXPECT_FALSE((*Miss)->stats().CacheHit);
    EXPECT_EQ(JIT->cacheInfo().Stores, 1u);
    EXPECT_NE(onlyFile(), "");
    expectAgrees(*BS, (*Miss)->function());

    // The same engine, and the same set while the first copy still lives.
    auto Hit = JIT->compile(*BS);
    ASSERT_TRUE(!!Hit) << toString(Hit.takeError());
    EXPECT_TRUE((*Hit)->stats().CacheHit);
    EXPECT_EQ((*Hit)->stats().LowerMs, 0);
    EXPECT_EQ((*Hit)->stats().NumGuards, (*Miss)->stats().NumGuards);
    EXPECT_EQ((*Hit)->stats().NumInlined, (*Miss)->stats().NumInlined);
    EXPECT_NE((*Hit)->function(), (*Miss)->function());
    expectAgrees(*BS, (*Hit)->function());

    // A new engine and an identical set over new memo slots and another
    // name: the object only depends on the structure.
    auto JIT2 = engine(L);
    SetBuilder SB2("another name");
    buildSet(SB2);
    auto BS2 = SB2.bind();
    auto Hit2 = JIT2->compile(*BS2);
    ASSERT_TRUE(!!Hit2) << toString(Hit2.takeError());
    EXPECT_TRUE((*Hit2)->stats().CacheHit);
    expectAgrees(*BS2, (*Hit2)->function());
    EXPECT_EQ(JIT2->cacheInfo().Hits, 1u);
    EXPECT_EQ(JIT2->cacheInfo().Misses, 0u);

    // Another structure is another key.
    SetBuilder SB3;
    buildSet(SB3, "other key");
    auto BS3 = SB3.bind();
    auto Miss3 = JIT2->compile(*BS3);
    ASSERT_TRUE(!!Miss3) << toString(Miss3.takeError());
    EXPECT_FALSE((*Miss3)->stats().CacheHit);
    EXPECT_TRUE(JIT->takeReportedErrors().empty());
    EXPECT_TRUE(JIT2->takeReportedErrors().empty());
  }
}

TEST_F(ObjectCacheTest, LevelsAndHostVersionsAreDifferentKeys) {
  SetBuilder SB;
  buildSet(SB);
  auto BS = SB.bind();
  auto A = engine(OptLevel::O0);
  auto B = engine(OptLevel::Light);
  ASSERT_TRUE(!!A->compile(*BS));
  auto C = B->compile(*BS);
  ASSERT_TRUE(!!C);
  EXPECT_FALSE((*C)->stats().CacheHit);
  JITOptions O;
  O.Level = OptLevel::O0;
  O.CacheDir = Dir;
  O.HostVersions = "torch=other";
  auto D = GuardJIT::create(O);
  ASSERT_TRUE(!!D);
  auto E = (*D)->compile(*BS);
  ASSERT_TRUE(!!E);
  EXPECT_FALSE((*E)->stats().CacheHit);
}

/// Damages the one file in Dir with `Damage` and checks that the next
/// compile misses, rejects the file and still gives a correct function.
void expectMissAfter(ObjectCacheTest &T, GuardJIT &JIT,
                     const BoundGuardSet &BS, const std::string &File,
                     bool ExpectRejected) {
  uint64_t Rejected = JIT.cacheInfo().Rejected;
  auto C = JIT.compile(BS);
  ASSERT_TRUE(!!C) << toString(C.takeError());
  EXPECT_FALSE((*C)->stats().CacheHit);
  expectAgrees(BS, (*C)->function());
  if (ExpectRejected)
    EXPECT_EQ(JIT.cacheInfo().Rejected, Rejected + 1);
  // The damaged file was replaced by a good one: the next compile hits.
  auto H = JIT.compile(BS);
  ASSERT_TRUE(!!H) << toString(H.takeError());
  EXPECT_TRUE((*H)->stats().CacheHit);
  expectAgrees(BS, (*H)->function());
}

TEST_F(ObjectCacheTest, DamagedFilesAreMissesNotCrashes) {
  auto JIT = engine();
  SetBuilder SB;
  buildSet(SB);
  auto BS = SB.bind();
  ASSERT_TRUE(!!JIT->compile(*BS));
  std::string File = onlyFile();
  ASSERT_NE(File, "");
  std::string Good;
  {
    std::ifstream In(File, std::ios::binary);
    Good.assign(std::istreambuf_iterator<char>(In), {});
  }
  ASSERT_GT(Good.size(), 200u);
  auto Write = [&](const std::string &Bytes) {
    std::ofstream Out(File, std::ios::binary | std::ios::trunc);
    Out << Bytes;
  };

  // A flipped byte in the object, in the layout, in the header's key.
  for (size_t At : {Good.size() - 100, size_t(100), size_t(20)}) {
    SCOPED_TRACE(At);
    std::string Bad = Good;
    Bad[At] ^= 0x5a;
    Write(Bad);
    expectMissAfter(*this, *JIT, *BS, File, /*ExpectRejected=*/true);
  }
  // Truncated: at the end, inside the header, empty.
  for (size_t Len : {Good.size() - 1, size_t(40), size_t(0)}) {
    SCOPED_TRACE(Len);
    Write(Good.substr(0, Len));
    expectMissAfter(*this, *JIT, *BS, File, /*ExpectRejected=*/true);
  }
  // Random bytes of the right length.
  std::string Noise(Good.size(), '\0');
  for (size_t I = 0; I < Noise.size(); ++I)
    Noise[I] = char((I * 2654435761u) >> 13);
  Write(Noise);
  expectMissAfter(*this, *JIT, *BS, File, /*ExpectRejected=*/true);

  // Foreign: the entry of another set under this set's name.
  SetBuilder SB2;
  buildSet(SB2, "other key");
  auto BS2 = SB2.bind();
  llvm::sys::fs::remove(File);
  ASSERT_TRUE(!!JIT->compile(*BS2));
  std::string Other = onlyFile();
  ASSERT_NE(Other, "");
  ASSERT_FALSE(llvm::sys::fs::rename(Other, File));
  expectMissAfter(*this, *JIT, *BS, File, /*ExpectRejected=*/true);

  // A directory in place of the file.
  llvm::sys::fs::remove(File);
  ASSERT_FALSE(llvm::sys::fs::create_directory(File));
  {
    auto C = JIT->compile(*BS);
    ASSERT_TRUE(!!C) << toString(C.takeError());
    EXPECT_FALSE((*C)->stats().CacheHit);
    expectAgrees(*BS, (*C)->function());
  }
  llvm::sys::fs::remove(File);
}

TEST_F(ObjectCacheTest, AValidEntryThatDoesNotLinkIsAMiss) {
  // Checksum and key are right, the object is not: linking fails, the file
  // is dropped and the set is compiled.
  auto JIT = engine();
  SetBuilder SB;
  buildSet(SB);
  auto BS = SB.bind();
  ASSERT_TRUE(!!JIT->compile(*BS));
  std::string File = onlyFile();
  ASSERT_NE(File, "");
  std::string Why;
  auto Cache = ObjectCache::open(Dir, &Why);
  ASSERT_TRUE(Cache) << Why;
  // The key is the file's name.
  ObjectCacheKey Key{};
  llvm::StringRef Hex = llvm::sys::path::stem(File);
  ASSERT_EQ(Hex.size(), 2 * Key.size());
  for (size_t I = 0; I < Key.size(); ++I)
    Key[I] = uint8_t(std::stoi(Hex.substr(2 * I, 2).str(), nullptr, 16));
  auto Entry = Cache->lookup(Key);
  ASSERT_TRUE(Entry);
  for (const char *Object : {"not an object", "\x7f" "ELF garbage........"}) {
    ASSERT_FALSE(!!Cache->store(Key, Entry->Table, Entry->Stats, Object));
    expectMissAfter(*this, *JIT, *BS, File, /*ExpectRejected=*/true);
  }
  // A well-formed object that does not define the check function (the
  // engine gives ORC the object's interface instead of reading it, so this
  // fails at the lookup, not when the object is added).
  std::string Renamed = Entry->Object->getBuffer().str();
  size_t At = Renamed.find("gj_check");
  ASSERT_NE(At, std::string::npos);
  Renamed[At + 5] = 'x'; // gj_chxck
  ASSERT_FALSE(!!Cache->store(Key, Entry->Table, Entry->Stats, Renamed));
  expectMissAfter(*this, *JIT, *BS, File, /*ExpectRejected=*/true);
  // A well-formed object that names a symbol nobody defines: the link fails
  // after its memory was allocated (JITLink abandons the allocation), and
  // the engine must stay usable.
  std::string Unresolved = Entry->Object->getBuffer().str();
  At = Unresolved.find("gj_rt_");
  ASSERT_NE(At, std::string::npos);
  Unresolved[At + 1] = 'x'; // gx_rt_...
  ASSERT_FALSE(!!Cache->store(Key, Entry->Table, Entry->Stats, Unresolved));
  expectMissAfter(*this, *JIT, *BS, File, /*ExpectRejected=*/true);
  // A layout that names slots outside the set: an object past the table,
  // a memo array other than the one (Index 0), a kind this build does not
  // know.
  for (TableSlot Extra : {TableSlot{TableSlot::Object, 1000000},
                          TableSlot{TableSlot::Memos, 1},
                          TableSlot{static_cast<TableSlot::SlotKind>(
                                        TableSlot::LastKind + 1),
                                    0}}) {
    SCOPED_TRACE(testing::Message() << "kind " << unsigned(Extra.Kind));
    std::vector<TableSlot> Wild = Entry->Table;
    Wild.push_back(Extra);
    ASSERT_FALSE(!!Cache->store(Key, Wild, Entry->Stats,
                                Entry->Object->getBuffer()));
    expectMissAfter(*this, *JIT, *BS, File, /*ExpectRejected=*/true);
  }
}

TEST_F(ObjectCacheTest, MemoSlotsAreOneBaseWithOffsets) {
  // The set's memo slots / read descriptors are one table slot (their
  // array's base); each use is an offset from it.
  SetBuilder SB;
  buildSet(SB);
  auto BS = SB.bind();
  ASSERT_NE(BS->numMemos(), 0u) << "the test set needs memoized reads";
  for (bool CallMemo : {false, true}) {
    SCOPED_TRACE(CallMemo ? "CallMemo" : "full");
    llvm::LLVMContext Ctx;
    llvm::Module M("m", Ctx);
    M.setDataLayout("e-m:e-p270:32:32-p271:32:32-p272:64:64-i64:64-i128:128-"
                    "f80:128-n8:16:32:64-S128");
    std::vector<TableSlot> Table;
    LoweringOptions LO;
    LO.CallMemo = CallMemo;
    auto F = lowerGuardSetRelocatable(BS->set(), M, "f", Table, nullptr, LO);
    ASSERT_TRUE(!!F) << toString(F.takeError());
    size_t NumBases = 0;
    for (const TableSlot &T : Table) {
      EXPECT_NE(T.Kind, TableSlot::ValueMemo);
      EXPECT_NE(T.Kind, TableSlot::GuardMemo);
      if (T.Kind == TableSlot::Memos) {
        ++NumBases;
        bool InRange = false;
        EXPECT_EQ(tableSlotAddress(*BS, T, &InRange), BS->memos());
        EXPECT_TRUE(InRange);
      }
    }
    EXPECT_EQ(NumBases, 1u);
  }
}

TEST_F(ObjectCacheTest, UnusableDirectoriesTurnTheCacheOff) {
  SetBuilder SB;
  buildSet(SB);
  auto BS = SB.bind();
  auto ExpectOff = [&](const std::string &D, const char *Why) {
    SCOPED_TRACE(D);
    auto JIT = engine(OptLevel::O0, D);
    ASSERT_TRUE(JIT);
    GuardJIT::CacheInfo Info = JIT->cacheInfo();
    EXPECT_EQ(Info.Dir, "");
    EXPECT_NE(Info.Status.find(Why), std::string::npos) << Info.Status;
    auto C = JIT->compile(*BS);
    ASSERT_TRUE(!!C) << toString(C.takeError());
    EXPECT_FALSE((*C)->stats().CacheHit);
    expectAgrees(*BS, (*C)->function());
  };
  // Not creatable, a file, writable by others.
  ExpectOff("/proc/self/guardjit-cache", "cannot create");
  std::string File = Root + "/file";
  std::ofstream(File) << "x";
  ExpectOff(File, "not a directory");
  std::string Open = Root + "/open";
  ASSERT_EQ(mkdir(Open.c_str(), 0700), 0);
  ASSERT_EQ(chmod(Open.c_str(), 0777), 0);
  ExpectOff(Open, "writable by group or others");
  if (geteuid() == 0) {
    // Root can give a directory away.
    std::string Theirs = Root + "/theirs";
    ASSERT_EQ(mkdir(Theirs.c_str(), 0700), 0);
    ASSERT_EQ(chown(Theirs.c_str(), 65534, 65534), 0);
    ExpectOff(Theirs, "owned by another user");
  }

  // A new directory is private.
  auto JIT = engine();
  ASSERT_NE(JIT->cacheInfo().Dir, "") << JIT->cacheInfo().Status;
  struct stat St;
  ASSERT_EQ(stat(Dir.c_str(), &St), 0);
  EXPECT_EQ(St.st_mode & 0777, 0700u);

  // A directory that refuses writes (not for root, who writes anyway):
  // compiles work, the store error is reported.
  if (geteuid() != 0) {
    ASSERT_EQ(chmod(Dir.c_str(), 0500), 0);
    auto C = JIT->compile(*BS);
    ASSERT_TRUE(!!C) << toString(C.takeError());
    expectAgrees(*BS, (*C)->function());
    EXPECT_EQ(JIT->cacheInfo().StoreErrors, 1u);
    EXPECT_FALSE(JIT->takeReportedErrors().empty());
  }
}

TEST_F(ObjectCacheTest, ConcurrentWritersAndReadersOfOneKey) {
  SetBuilder SB;
  buildSet(SB);
  auto BS = SB.bind();
  // Engines compile the same set at once (compile needs no GIL); every
  // compile succeeds, hit or miss, and no reader ever sees a partial file.
  constexpr int Threads = 4, Rounds = 6;
  std::vector<std::unique_ptr<GuardJIT>> Engines;
  for (int I = 0; I < Threads; ++I)
    Engines.push_back(engine(OptLevel::O0));
  std::vector<std::vector<std::unique_ptr<CompiledCheck>>> Out(Threads);
  std::atomic<int> Failures{0};
  std::vector<std::thread> Pool;
  for (int T = 0; T < Threads; ++T)
    Pool.emplace_back([&, T] {
      for (int R = 0; R < Rounds; ++R) {
        if (T == 0 && R % 2 == 0)
          llvm::sys::fs::remove(onlyFile()); // writers race again
        auto C = Engines[T]->compile(*BS);
        if (!C) {
          llvm::consumeError(C.takeError());
          ++Failures;
          continue;
        }
        Out[T].push_back(std::move(*C));
      }
    });
  for (auto &Th : Pool)
    Th.join();
  EXPECT_EQ(Failures.load(), 0);
  uint64_t Rejected = 0, Hits = 0;
  for (auto &E : Engines) {
    Rejected += E->cacheInfo().Rejected;
    Hits += E->cacheInfo().Hits;
    EXPECT_TRUE(E->takeReportedErrors().empty());
  }
  EXPECT_EQ(Rejected, 0u);
  EXPECT_GT(Hits, 0u);
  for (auto &Checks : Out)
    for (auto &C : Checks)
      expectAgrees(*BS, C->function());
  // No temporary file is left behind.
  std::error_code EC;
  for (llvm::sys::fs::directory_iterator It(Dir, EC), End; It != End && !EC;
       It.increment(EC))
    EXPECT_TRUE(llvm::StringRef(It->path()).ends_with(".o")) << It->path();
  Out.clear();
}

TEST(ObjectCacheEnvironment, Spellings) {
  std::string Home = getenv("HOME") ? getenv("HOME") : "";
  auto With = [](const char *V) {
    if (V)
      setenv("GUARDJIT_CACHE_DIR", V, 1);
    else
      unsetenv("GUARDJIT_CACHE_DIR");
    return cacheDirFromEnvironment();
  };
  EXPECT_EQ(With(nullptr), "");
  EXPECT_EQ(With(""), "");
  EXPECT_EQ(With("off"), "");
  EXPECT_EQ(With("0"), "");
  EXPECT_EQ(With("/some/dir"), "/some/dir");
  setenv("XDG_CACHE_HOME", "/xdg", 1);
  EXPECT_EQ(With("1"), "/xdg/guardjit");
  EXPECT_EQ(With("default"), "/xdg/guardjit");
  unsetenv("XDG_CACHE_HOME");
  setenv("HOME", "/home/u", 1);
  EXPECT_EQ(With("on"), "/home/u/.cache/guardjit");
  unsetenv("GUARDJIT_CACHE_DIR");
  setenv("HOME", Home.c_str(), 1);
}

} // namespace

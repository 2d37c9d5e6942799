//===- ConcurrencyStressTest.cpp - checks, compiles and evictions at once -===//
//
// The thread/GIL contract of the JIT (JIT/Engine.h, include/guardjit/Check/TierUp.h,
// docs/threads.md), exercised all at once on real CPython objects:
//
//   - checker threads take the GIL with PyGILState_Ensure, run a batch of
//     checks and release it (so the GIL also moves inside a batch: the
//     switch interval is set to 10 us and some guards call Python code);
//     each call loads the unit's current code through an atomic pointer
//     (acquire, as CheckTarget::Fn) and must answer what the interpreter
//     answers on the same frame locals, and what the input was built to
//     answer (passing and failing inputs);
//   - compiler threads, without the GIL, compile the units' BoundGuardSets on
//     engines shared by both (O0, Light, O1, O2) and publish the new code
//     (release), or unpublish it (null: the interpreter runs, as for a
//     CheckTarget without code);
//   - an evictor destroys replaced code (ResourceTracker removal) once no
//     checker can still run it, concurrently with the compiles on the same
//     engines.
//
// Lifetime rule under test: a replaced version may be freed only after every
// checker batch that could have loaded it has ended. A checker holds its
// `Busy` mutex for a whole batch; the evictor locks and unlocks every
// checker's `Busy` after taking a retired version (a grace period). The GIL
// is not what protects the code: a check that calls Python may lose the GIL
// in the middle of native code.
//
// Duration: GUARDJIT_STRESS_SECONDS (default 2).
//
// The test can fail (checked when it was written; GUARDJIT_STRESS_BREAK
// repeats the experiments):
//   - GUARDJIT_STRESS_BREAK=early-free: the evictor skips the grace period.
//     Checkers record the versions each batch ran and, at the end of the
//     batch, find some of them already freed ("freed while a checker was
//     running it"); calls into unmapped code may also crash the binary.
//     Under TSan: "heap-use-after-free" / races on the freed Version.
//   - GUARDJIT_STRESS_BREAK=relaxed-publish: versions are published with a
//     relaxed store. Only TSan can see it (x86 keeps stores in order): it
//     reports a data race between the compiler's write of Version::Fn and
//     the checker's read of it.
//
//===----------------------------------------------------------------------===//
#include "guardjit/JIT/Engine.h"

#include "guardjit/IR/GuardSet.h"
#include "guardjit/Runtime/BoundGuardSet.h"
#include "guardjit/Runtime/Interpreter.h"
#include "guardjit/Runtime/Python.h"

#include "gtest/gtest.h"

#include "JITTestSupport.h"

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

using namespace guardjit;
using guardjit::test::Ref;
using guardjit::test::SetBuilder;

namespace {

using Clock = std::chrono::steady_clock;


const char *const Prelude = R"py(
class C:
    def __init__(self, a=1.5, t=(10, 20, 30)):
        self.a = a
        self.t = t

class C2(C):
    pass

def positive(x):
    # Enough bytecode for the eval loop to hand the GIL to another thread
    # (switch interval 10 us) while a native check is inside this call.
    s = 0
    for i in range(20):
        s += i
    return x > 0

def make_inputs(u, has_lambda, has_type_id):
    """Frame locals for unit u and whether its set passes on each: one
    passing input, then one mutation per guard. Fresh objects on every call
    (equal, not identical, strings: EQUALS_MATCH compares values)."""
    tag = ''.join(['tag', str(u)])
    seq = list(range(u % 3 + 1))
    def base():
        return {'x': 7, 'y': ''.join(['tag', str(u)]), 'o': C(),
                'd': {'k': ''.join(['v']), 'j': 1}, 'seq': list(seq)}
    out = [(base(), True)]
    def variant(key, value, expected):
        L = base()
        if value is KeyError:
            del L[key]
        else:
            L[key] = value
        out.append((L, expected))
    variant('x', 7.0, False)
    variant('x', -3, not has_lambda)
    variant('x', KeyError, False)
    variant('y', 'tag' + str(u + 1), False)
    variant('o', C(a=1), False)
    variant('o', C(t=(10, 21, 30)), False)
    variant('o', C(t=(10, 20)), False)
    variant('o', C2(), not has_type_id)
    variant('d', {'j': 1}, False)
    variant('d', {'k': 'w'}, False)
    variant('d', [('k', 'v')], False)
    variant('seq', seq + [0], False)
    variant('seq', tuple(seq), True)
    return out
)py";

/// The namespace of the prelude (borrowed, lives forever). GIL held.
PyObject *prelude() {
  static PyObject *NS = guardjit::test::runPrelude(Prelude);
  return NS;
}

Ref eval(const char *Expr) {
  PyObject *R = PyRun_String(Expr, Py_eval_input, prelude(), prelude());
  if (!R)
    PyErr_Print();
  return Ref(R);
}


/// One compiled version of a unit as checkers see it. Every field is written
/// before the version is published and never after.
struct Version {
  CheckFn Fn = nullptr;
  uint64_t Serial = 0;
  OptLevel Level = OptLevel::O0;
  std::unique_ptr<CompiledCheck> Code;
};

/// A compile unit: a bound set shaped like a small Dynamo set (type, value,
/// attribute, tuple item, dict item, length and lambda guards), its inputs
/// and its current code.
struct Unit {
  std::vector<Ref> Keep; // objects of the set; released after Bound
  std::unique_ptr<BoundGuardSet> Bound;
  bool HasLambda = false, HasTypeId = false;
  /// (frame locals, expected answer); replaced by checkers with the GIL.
  std::vector<std::pair<Ref, bool>> Inputs;
  std::atomic<Version *> Current{nullptr}; ///< null: the interpreter runs
};

std::unique_ptr<Unit> makeUnit(unsigned U) {
  auto Result = std::make_unique<Unit>();
  Unit &Un = *Result;
  Un.HasLambda = U % 2 == 0;
  Un.HasTypeId = U % 3 == 0;
  SetBuilder SB("stress unit " + std::to_string(U));
  Ref Int = eval("int"), Float = eval("float"), CType = eval("C"),
      Twenty = eval("20"), V = eval("'v'"), Pos = eval("positive");
  std::string TagText = "tag" + std::to_string(U);
  Ref Tag(PyUnicode_FromString(TagText.c_str()));

  ValueId X = SB.local("x");
  SB.guard(GuardKind::TypeMatch, {X}, SB.object(Int.get(), ObjectKind::Type));
  if (Un.HasLambda)
    SB.guard(GuardKind::Lambda, {X},
             SB.object(Pos.get(), ObjectKind::Callable, true));
  SB.guard(GuardKind::EqualsMatch, {SB.local("y")},
           SB.object(Tag.get(), ObjectKind::Constant, true));
  ValueId O = SB.local("o");
  if (Un.HasTypeId)
    SB.guard(GuardKind::IdMatch, {SB.indexed(AccessorKind::Type, O, -1)},
             SB.object(CType.get(), ObjectKind::Type));
  SB.guard(GuardKind::TypeMatch, {SB.keyed(AccessorKind::GetAttr, O, "a")},
           SB.object(Float.get(), ObjectKind::Type));
  ValueId T = SB.keyed(AccessorKind::GetAttr, O, "t");
  SB.guard(GuardKind::LengthCheck, {T}, InvalidId, 3);
  SB.guard(GuardKind::EqualsMatch,
           {SB.indexed(AccessorKind::TupleGetItem, T, 1)},
           SB.object(Twenty.get(), ObjectKind::Constant, true));
  ValueId D = SB.local("d");
  SB.guard(GuardKind::DictContains, {D}, SB.str("k"), 1);
  SB.guard(GuardKind::EqualsMatch,
           {SB.keyed(AccessorKind::DictGetItem, D, "k")},
           SB.object(V.get(), ObjectKind::Constant, true));
  SB.guard(GuardKind::LengthCheck, {SB.local("seq")}, InvalidId, U % 3 + 1);

  std::string Error;
  Un.Bound = BoundGuardSet::bind(SB.S, &Error);
  EXPECT_TRUE(Un.Bound) << Error;
  Un.Keep = std::move(SB.Keep);
  return Result;
}

/// Replaces `Un.Inputs` with fresh objects (GIL held).
void refreshInputs(Unit &Un, unsigned U) {
  PyObject *Make = PyDict_GetItemString(prelude(), "make_inputs");
  Ref List(PyObject_CallFunction(Make, "IOO", U,
                                 Un.HasLambda ? Py_True : Py_False,
                                 Un.HasTypeId ? Py_True : Py_False));
  if (!List.get()) {
    PyErr_Print();
    ADD_FAILURE() << "make_inputs failed";
    return;
  }
  std::vector<std::pair<Ref, bool>> Fresh;
  for (Py_ssize_t I = 0; I < PyList_GET_SIZE(List.get()); ++I) {
    PyObject *Pair = PyList_GET_ITEM(List.get(), I);
    Fresh.emplace_back(Ref(Py_NewRef(PyTuple_GET_ITEM(Pair, 0))),
                       PyTuple_GET_ITEM(Pair, 1) == Py_True);
  }
  Un.Inputs.swap(Fresh); // the old inputs die here, with the GIL
}

double stressSeconds() {
  const char *S = std::getenv("GUARDJIT_STRESS_SECONDS");
  double V = S ? std::atof(S) : 0;
  return V > 0 ? V : 2.0;
}

bool breaks(const char *Mode) {
  const char *S = std::getenv("GUARDJIT_STRESS_BREAK");
  return S && std::strcmp(S, Mode) == 0;
}

const char *levelName(OptLevel L) {
  switch (L) {
  case OptLevel::O0:
    return "O0";
  case OptLevel::Light:
    return "Light";
  case OptLevel::O1:
    return "O1";
  case OptLevel::O2:
    return "O2";
  }
  return "?";
}

/// Everything the threads share.
struct Shared {
  std::vector<std::unique_ptr<Unit>> Units;
  std::vector<std::unique_ptr<GuardJIT>> Engines;
  std::atomic<bool> Stop{false};
  std::atomic<uint64_t> NextSerial{1};

  std::mutex RetireLock;
  std::vector<std::unique_ptr<Version>> Retired; ///< unpublished, not freed

  std::mutex FreedLock;
  std::unordered_set<uint64_t> Freed; ///< serials of destroyed versions

  /// One per checker, held for a whole batch.
  std::vector<std::unique_ptr<std::mutex>> Busy;

  std::mutex FailureLock;
  std::vector<std::string> Failures; ///< the first few, reported at the end
  std::atomic<uint64_t> NumFailures{0};

  // Counters.
  std::atomic<uint64_t> Calls{0}, NativeCalls{0}, Batches{0}, Compiles{0},
      Unpublished{0}, Evicted{0}, CompileErrors{0};
  std::atomic<uint64_t> CallsAtLevel[4] = {};

  void fail(std::string Msg) {
    NumFailures.fetch_add(1);
    std::lock_guard<std::mutex> G(FailureLock);
    if (Failures.size() < 20)
      Failures.push_back(std::move(Msg));
  }
};

/// One batch of checks of one checker (GIL held, Busy held).
void checkBatch(Shared &Sh, std::mt19937 &Rng,
                std::vector<uint64_t> &RanSerials) {
  std::uniform_int_distribution<size_t> PickUnit(0, Sh.Units.size() - 1);
  for (int Call = 0; Call < 40; ++Call) {
    size_t U = PickUnit(Rng);
    Unit &Un = *Sh.Units[U];
    if (Rng() % 64 == 0)
      refreshInputs(Un, U); // new objects: new addresses and dict versions
    size_t I = Rng() % Un.Inputs.size();
    // Both references live to the end of this call even if another checker
    // refreshes the inputs while this one has lost the GIL.
    Ref Locals(Py_NewRef(Un.Inputs[I].first.get()));
    bool Expected = Un.Inputs[I].second;

    const Version *V = Un.Current.load(std::memory_order_acquire);
    int Native = -1;
    uint64_t Serial = 0;
    OptLevel Level = OptLevel::O0;
    if (V) {
      Serial = V->Serial;
      Level = V->Level;
      RanSerials.push_back(Serial);
      Native = V->Fn(Locals.get());
      if (PyErr_Occurred()) {
        PyErr_Clear();
        Sh.fail("native check left an error set");
      }
    }
    bool Interp = interpret(*Un.Bound, Locals.get());
    if (PyErr_Occurred()) {
      PyErr_Clear();
      Sh.fail("interpreter left an error set");
    }
    Sh.Calls.fetch_add(1, std::memory_order_relaxed);
    if (Interp != Expected)
      Sh.fail("unit " + std::to_string(U) + " input " + std::to_string(I) +
              ": interpreter says " + std::to_string(Interp));
    if (V) {
      Sh.NativeCalls.fetch_add(1, std::memory_order_relaxed);
      Sh.CallsAtLevel[static_cast<int>(Level)].fetch_add(
          1, std::memory_order_relaxed);
      if (Native != (Expected ? 1 : 0))
        Sh.fail("unit " + std::to_string(U) + " input " + std::to_string(I) +
                ": native (" + levelName(Level) + ", version " +
                std::to_string(Serial) + ") returned " +
                std::to_string(Native) + ", interpreter " +
                std::to_string(Interp));
    }
  }
}

void checker(Shared &Sh, unsigned Index) {
  std::mt19937 Rng(1000 + Index);
  std::vector<uint64_t> RanSerials;
  while (!Sh.Stop.load(std::memory_order_relaxed)) {
    PyGILState_STATE G = PyGILState_Ensure();
    {
      std::lock_guard<std::mutex> B(*Sh.Busy[Index]);
      RanSerials.clear();
      checkBatch(Sh, Rng, RanSerials);
      // Still inside the batch: nothing it ran may have been freed yet.
      std::lock_guard<std::mutex> F(Sh.FreedLock);
      for (uint64_t S : RanSerials)
        if (Sh.Freed.count(S)) {
          Sh.fail("version " + std::to_string(S) +
                  " was freed while a checker was running it");
          break;
        }
    }
    Sh.Batches.fetch_add(1, std::memory_order_relaxed);
    PyGILState_Release(G);
  }
}

/// Compiles and swaps without the GIL.
void compiler(Shared &Sh, unsigned Index) {
  std::mt19937 Rng(2000 + Index);
  const std::memory_order Publish = breaks("relaxed-publish")
                                        ? std::memory_order_relaxed
                                        : std::memory_order_acq_rel;
  while (!Sh.Stop.load(std::memory_order_relaxed)) {
    Unit &Un = *Sh.Units[Rng() % Sh.Units.size()];
    Version *New = nullptr;
    if (Rng() % 8 != 0) {
      // Mostly the fast levels, as a host would compile first tiers.
      unsigned R = Rng() % 8;
      unsigned E = R < 3 ? 0 : R < 6 ? 1 : R < 7 ? 2 : 3;
      GuardJIT &Engine = *Sh.Engines[E];
      auto C = Engine.compile(*Un.Bound);
      if (!C) {
        Sh.CompileErrors.fetch_add(1);
        Sh.fail("compile failed: " + toString(C.takeError()));
        continue;
      }
      auto V = std::make_unique<Version>();
      V->Fn = (*C)->function();
      V->Level = Engine.options().Level;
      V->Serial = Sh.NextSerial.fetch_add(1, std::memory_order_relaxed);
      V->Code = std::move(*C);
      New = V.release();
      Sh.Compiles.fetch_add(1, std::memory_order_relaxed);
    } else {
      Sh.Unpublished.fetch_add(1, std::memory_order_relaxed);
    }
    // Release: the Version (and the code it points to) is complete before
    // a checker can load it. Acquire: this thread now owns the old one.
    Version *Old = Un.Current.exchange(New, Publish);
    if (Old) {
      std::lock_guard<std::mutex> G(Sh.RetireLock);
      Sh.Retired.emplace_back(Old);
    }
  }
}

/// Frees retired versions once no checker batch can still run them.
void evictor(Shared &Sh) {
  const bool SkipGrace = breaks("early-free");
  auto Drain = [&] {
    std::vector<std::unique_ptr<Version>> Batch;
    {
      std::lock_guard<std::mutex> G(Sh.RetireLock);
      Batch.swap(Sh.Retired);
    }
    if (Batch.empty())
      return false;
    // Grace period: every batch running now has ended once its Busy is
    // free; batches starting later load a newer version (the exchange
    // happened before this lock, which happens before theirs).
    if (!SkipGrace)
      for (auto &B : Sh.Busy)
        std::lock_guard<std::mutex> G(*B);
    for (auto &V : Batch) {
      {
        std::lock_guard<std::mutex> G(Sh.FreedLock);
        Sh.Freed.insert(V->Serial);
      }
      V.reset(); // ResourceTracker::remove, racing with compiles
      Sh.Evicted.fetch_add(1, std::memory_order_relaxed);
    }
    return true;
  };
  while (!Sh.Stop.load(std::memory_order_relaxed))
    if (!Drain())
      std::this_thread::sleep_for(std::chrono::microseconds(200));
  Drain();
}

TEST(ConcurrencyStress, ChecksWhileCompilingAndEvicting) {
  if (!Py_IsInitialized())
    Py_InitializeEx(0);
  prelude();
  Ref Sys(PyImport_ImportModule("sys"));
  ASSERT_TRUE(Sys.get());
  Ref OldInterval(PyObject_CallMethod(Sys.get(), "getswitchinterval", nullptr));
  Ref R1(PyObject_CallMethod(Sys.get(), "setswitchinterval", "d", 1e-5));

  constexpr unsigned NumUnits = 6, NumCheckers = 3, NumCompilers = 2;
  Shared Sh;
  for (OptLevel L :
       {OptLevel::O0, OptLevel::Light, OptLevel::O1, OptLevel::O2}) {
    auto E = GuardJIT::create({L, /*VerifyIR=*/true});
    ASSERT_TRUE(!!E) << toString(E.takeError());
    Sh.Engines.push_back(std::move(*E));
  }
  for (unsigned U = 0; U < NumUnits; ++U) {
    Sh.Units.push_back(makeUnit(U));
    ASSERT_TRUE(Sh.Units.back()->Bound);
    refreshInputs(*Sh.Units.back(), U);
  }
  for (unsigned C = 0; C < NumCheckers; ++C)
    Sh.Busy.push_back(std::make_unique<std::mutex>());

  const double Seconds = stressSeconds();
  auto Start = Clock::now();
  PyThreadState *Main = PyEval_SaveThread();
  std::vector<std::thread> Threads;
  for (unsigned C = 0; C < NumCheckers; ++C)
    Threads.emplace_back(checker, std::ref(Sh), C);
  for (unsigned C = 0; C < NumCompilers; ++C)
    Threads.emplace_back(compiler, std::ref(Sh), C);
  Threads.emplace_back(evictor, std::ref(Sh));
  while (std::chrono::duration<double>(Clock::now() - Start).count() <
             Seconds &&
         Sh.NumFailures.load() == 0)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  Sh.Stop.store(true);
  for (std::thread &T : Threads)
    T.join();
  PyEval_RestoreThread(Main);
  double Elapsed =
      std::chrono::duration<double>(Clock::now() - Start).count();

  for (const std::string &F : Sh.Failures)
    ADD_FAILURE() << F;
  EXPECT_EQ(Sh.NumFailures.load(), 0u);
  std::printf("[stress] %.2f s: %llu batches, %llu checks (%llu native: O0 "
              "%llu, Light %llu, O1 %llu, O2 %llu), %llu compiles, %llu "
              "unpublished, %llu evicted\n",
              Elapsed, (unsigned long long)Sh.Batches.load(),
              (unsigned long long)Sh.Calls.load(),
              (unsigned long long)Sh.NativeCalls.load(),
              (unsigned long long)Sh.CallsAtLevel[0].load(),
              (unsigned long long)Sh.CallsAtLevel[1].load(),
              (unsigned long long)Sh.CallsAtLevel[2].load(),
              (unsigned long long)Sh.CallsAtLevel[3].load(),
              (unsigned long long)Sh.Compiles.load(),
              (unsigned long long)Sh.Unpublished.load(),
              (unsigned long long)Sh.Evicted.load());
  std::fflush(stdout);
  // The run exercised what it claims to: both tiers ran, code was replaced
  // and freed while checkers ran.
  EXPECT_GT(Sh.Batches.load(), NumCheckers);
  int LevelsRun = 0;
  for (auto &N : Sh.CallsAtLevel)
    LevelsRun += N.load() > 0;
  EXPECT_GE(LevelsRun, 2);
  EXPECT_LT(Sh.NativeCalls.load(), Sh.Calls.load()) << "interpreter never ran";
  EXPECT_GT(Sh.Evicted.load(), 0u);

  // Code before engines; bound sets (Python references) with the GIL held.
  // All threads have ended: no batch runs. A compiler may have retired a
  // version after the evictor's last drain.
  Sh.Retired.clear();
  for (auto &U : Sh.Units)
    delete U->Current.exchange(nullptr);
  for (auto &E : Sh.Engines)
    for (const std::string &Err : E->takeReportedErrors())
      ADD_FAILURE() << "reported: " << Err;
  Sh.Engines.clear();
  Sh.Units.clear();
  Ref R2(PyObject_CallMethod(Sys.get(), "setswitchinterval", "O",
                             OldInterval.get()));
}

} // namespace

//===- EvictionStressTest.cpp - Compile/evict cycles free everything ------===//
//
// Issue 15's lifetime rule at a small size: a guard set bound, compiled,
// checked and evicted (its CompiledCheck and BoundGuardSet destroyed, as the
// plugin does when a cache entry dies and the embedding API in evict()) gives
// back its code, its ORC resources and its heap. After warm-up, 300 cycles of
// a 100-guard set must grow the heap in use (mallinfo2) and the address space
// (/proc/self/statm) by less than 1 KB per cycle. The same loop keeping its
// sets alive shows that the measurement sees a leak. The full size (10,000
// cycles over every corpus set, resident memory) is bench/EvictionBench.cpp.
//
//===----------------------------------------------------------------------===//
#include "JITTestSupport.h"

#include "guardjit/JIT/Engine.h"
#include "guardjit/Runtime/Interpreter.h"

#include <malloc.h>

#include <cstdio>
#include <vector>

using namespace guardjit;
using namespace guardjit::test;

namespace {

/// Heap bytes in use plus mapped address space, in bytes.
size_t footprint() {
  size_t Pages = 0;
  if (FILE *F = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(F, "%zu", &Pages) != 1)
      Pages = 0;
    std::fclose(F);
  }
  return static_cast<size_t>(mallinfo2().uordblks) + Pages * 4096;
}

/// 100 guards on the items of `L['t']` (an inline tuple read each) and a few
/// dict reads: the shape of a small model's set.
void buildSet(SetBuilder &SB, PyObject *Items, PyObject *Globals) {
  ValueId T = SB.local("t");
  SB.guard(GuardKind::TypeMatch, {T},
           SB.object(reinterpret_cast<PyObject *>(&PyTuple_Type),
                     ObjectKind::Type));
  SB.guard(GuardKind::LengthCheck, {T}, InvalidId, PyTuple_GET_SIZE(Items));
  for (Py_ssize_t I = 0; I < PyTuple_GET_SIZE(Items); ++I) {
    ValueId V = SB.indexed(AccessorKind::TupleGetItem, T, I);
    PyObject *Item = PyTuple_GET_ITEM(Items, I);
    if (I % 2)
      SB.guard(GuardKind::TypeMatch, {V},
               SB.object(reinterpret_cast<PyObject *>(Py_TYPE(Item)),
                         ObjectKind::Type));
    else
      SB.guard(GuardKind::EqualsMatch, {V}, SB.object(Item));
  }
  ValueId G = SB.globals(Globals);
  ValueId Torch = SB.keyed(AccessorKind::DictGetItem, G, "torch_like");
  SB.guard(GuardKind::IdMatch, {Torch},
           SB.object(PyDict_GetItemString(Globals, "torch_like")));
}

} // namespace

TEST(EvictionStress, CompileEvictCyclesFreeEverything) {
  Ref Globals(runPrelude("torch_like = object()\n"
                         "t = tuple(range(49)) + tuple(float(i) for i in range(49))\n"));
  ASSERT_TRUE(Globals);
  PyObject *Items = PyDict_GetItemString(Globals.get(), "t");
  ASSERT_TRUE(Items);
  Ref Locals(PyDict_New());
  PyDict_SetItemString(Locals.get(), "t", Items);

  auto E = GuardJIT::create({OptLevel::Light});
  ASSERT_TRUE(!!E) << llvm::toString(E.takeError());
  GuardJIT &JIT = **E;
  SetBuilder SB;
  buildSet(SB, Items, Globals.get());
  ASSERT_GE(SB.S->guards().size(), 100u);

  struct Unit {
    std::unique_ptr<BoundGuardSet> Bound;
    std::unique_ptr<CompiledCheck> Code;
  };
  auto Cycle = [&]() -> Unit {
    Unit U;
    std::string Error;
    U.Bound = BoundGuardSet::bind(SB.S, &Error);
    EXPECT_TRUE(U.Bound) << Error;
    if (!U.Bound)
      return U;
    auto C = JIT.compile(*U.Bound);
    if (!C) {
      ADD_FAILURE() << llvm::toString(C.takeError());
      return U;
    }
    U.Code = std::move(*C);
    EXPECT_EQ(U.Code->function()(Locals.get()), 1);
    EXPECT_EQ(interpret(*U.Bound, Locals.get()), 1);
    return U;
  };

  constexpr int Warm = 50, N = 300;
  for (int I = 0; I < Warm; ++I)
    Cycle(); // evicted at once: destroyed at the end of the statement
  malloc_trim(0);
  size_t Before = footprint();
  for (int I = 0; I < N; ++I)
    Cycle();
  malloc_trim(0);
  double PerCycle =
      (static_cast<double>(footprint()) - static_cast<double>(Before)) / N;
  EXPECT_LT(PerCycle, 1024.0) << "bytes kept per compile/evict cycle";

  // The measurement sees a leak: keeping the units grows it by at least a
  // page of code per unit.
  std::vector<Unit> Alive;
  Before = footprint();
  for (int I = 0; I < 50; ++I)
    Alive.push_back(Cycle());
  double KeptPerUnit =
      (static_cast<double>(footprint()) - static_cast<double>(Before)) / 50;
  EXPECT_GT(KeptPerUnit, 4096.0);
  Alive.clear();
  EXPECT_TRUE(JIT.takeReportedErrors().empty());
  std::printf("compile/evict: %.1f bytes per cycle kept; %.0f bytes per unit "
              "while alive\n",
              PerCycle, KeptPerUnit);
}

//===- TierUp.cpp - Recompile hot checks off the calling thread -----------===//
#include "TierUp.h"

#include "Logging.h"

#include "llvm/Support/Error.h"
#include "llvm/Support/ThreadPool.h"
#include "llvm/Support/Threading.h"

#include <Python.h>
#include <pthread.h>

#include <chrono>
#include <cstdio>
#include <condition_variable>
#include <mutex>
#include <utility>
#include <vector>

namespace guardjit {
namespace {

using Clock = std::chrono::steady_clock;

/// Everything the worker shares with the GIL holder. Allocated once per
/// process (and again in a fork child) and never freed: the pool's thread
/// must not be joined by a static destructor after Python finalized.
struct State {
  std::mutex Lock; ///< guards the fields below
  std::condition_variable Idle;
  TierUpStats Stats;
  bool Stopped = false;
  /// Targets whose last worker-side reference ended; destroyed with the GIL.
  std::vector<std::shared_ptr<CheckTarget>> Graveyard;
  bool DrainScheduled = false;
  /// Held by the worker while it compiles and swaps; fork() takes it first.
  std::mutex Busy;
  /// Created at the first schedule(): one thread, never a second.
  llvm::StdThreadPool *Pool = nullptr;
};

State *S = nullptr;

void drainGraveyard() {
  std::vector<std::shared_ptr<CheckTarget>> Dead;
  {
    std::lock_guard<std::mutex> G(S->Lock);
    Dead.swap(S->Graveyard);
    S->DrainScheduled = false;
  }
  // Retired code of the live ones goes now if no call runs it; the dead
  // ones are destroyed here, with the GIL: BoundGuardSet drops its
  // references.
  for (const std::shared_ptr<CheckTarget> &T : Dead)
    if (T->RetiredPending.load(std::memory_order_relaxed))
      freeRetired(*T);
}

int drainPendingCall(void *) {
  if (S)
    drainGraveyard();
  return 0;
}

/// Hands the worker's reference to the GIL holder. Worker thread, no GIL.
void bury(std::shared_ptr<CheckTarget> T) {
  bool Schedule;
  {
    std::lock_guard<std::mutex> G(S->Lock);
    S->Graveyard.push_back(std::move(T));
    Schedule = !S->DrainScheduled;
    S->DrainScheduled = true;
  }
  // Needs neither the GIL nor a thread state. On failure (the queue of
  // pending calls is full) the next schedule()/wait() drains instead.
  if (Schedule && Py_AddPendingCall(drainPendingCall, nullptr) != 0) {
    std::lock_guard<std::mutex> G(S->Lock);
    S->DrainScheduled = false;
  }
}

void finishJob(std::shared_ptr<CheckTarget> T, bool Dropped, bool Failed,
               double Ms, std::string Error) {
  bury(std::move(T));
  std::lock_guard<std::mutex> G(S->Lock);
  --S->Stats.Pending;
  S->Stats.Dropped += Dropped;
  S->Stats.Failed += Failed;
  S->Stats.Installed += !Dropped && !Failed;
  S->Stats.CompileMs += Ms;
  if (Failed)
    S->Stats.LastError = std::move(Error);
  if (S->Stats.Pending == 0)
    S->Idle.notify_all();
}

void runJob(std::shared_ptr<CheckTarget> T, GuardJIT *Engine, GuardJIT *Then);

/// Queues a job. Either thread; the caller has counted it as pending.
void post(std::shared_ptr<CheckTarget> T, GuardJIT *Engine, GuardJIT *Then) {
  S->Pool->async([T = std::move(T), Engine, Then]() mutable {
    runJob(std::move(T), Engine, Then);
  });
}

void runJob(std::shared_ptr<CheckTarget> T, GuardJIT *Engine, GuardJIT *Then) {
  bool Drop;
  {
    std::lock_guard<std::mutex> G(S->Lock);
    // The worker's reference is the only one left: the unit is gone (and
    // no one can take a new one: there are no weak references).
    Drop = S->Stopped || T.use_count() == 1;
  }
  if (Drop)
    return finishJob(std::move(T), /*Dropped=*/true, false, 0, "");
  std::unique_lock<std::mutex> Busy(S->Busy);
  auto Start = Clock::now();
  llvm::Expected<std::unique_ptr<CompiledCheck>> C = Engine->compile(*T->Bound);
  double Ms =
      std::chrono::duration<double, std::milli>(Clock::now() - Start).count();
  if (!C) {
    Busy.unlock();
    return finishJob(std::move(T), false, /*Failed=*/true, Ms,
                     llvm::toString(C.takeError()));
  }
  std::shared_ptr<CompiledCheck> New(std::move(*C));
  if (logEnabled(LogLevel::Debug)) { // thread-safe, no GIL (Logging.h)
    const CompileStats &St = New->stats();
    char Ms[96];
    std::snprintf(Ms, sizeof(Ms), "%.2f ms lowering + %.2f ms LLVM",
                  St.LowerMs, St.CompileMs);
    logMessage(LogLevel::Debug,
               "guard set " + T->Bound->set().name() + ": " +
                   std::to_string(St.NumGuards) + " guards compiled at " +
                   optLevelName(Engine->options().Level) +
                   " in the background (" + std::to_string(St.NumInlined) +
                   " inlined, " + std::to_string(St.NumHelpers) +
                   " helper calls) in " + Ms);
  }
  if (T->Distrusted) { // read without the GIL: at worst one more compile
    Busy.unlock();
    return finishJob(std::move(T), /*Dropped=*/true, false, Ms, "");
  }
  // The first call of the new code also runs the interpreter (runFull).
  T->Unverified.store(New->function(), std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> G(T->CodeLock);
    // The code is complete before its address is published (callCheck
    // loads with acquire), and published before the old code is retired:
    // a call that sees RetiredPending (after taking CodeLock) sees the new
    // Fn, so only calls in flight can still run the old code.
    T->Fn.store(New->function(), std::memory_order_release);
    T->Level.store(static_cast<int>(Engine->options().Level),
                   std::memory_order_relaxed);
    if (T->Native) {
      T->Retired.push_back(std::move(T->Native));
      T->RetiredPending.store(true, std::memory_order_relaxed);
    }
    T->Native = New;
  }
  Busy.unlock();
  // The next level, as its own job: a unit compiled at the default tier is
  // recompiled at the tier-up level only after every earlier job ran, so a
  // burst of new units all get their first code before any tier-up.
  if (Then && Then->options().Level > Engine->options().Level) {
    std::lock_guard<std::mutex> G(S->Lock);
    if (!S->Stopped) {
      ++S->Stats.Scheduled;
      ++S->Stats.Pending;
      post(T, Then, nullptr);
    }
  }
  finishJob(std::move(T), false, false, Ms, "");
}

void forkPrepare() {
  if (S)
    S->Busy.lock();
}

void forkParent() {
  if (S)
    S->Busy.unlock();
}

void forkChild() {
  // The worker thread does not exist here; its state (locks possibly held
  // by it, queued jobs) is abandoned, not freed.
  S = nullptr;
}

State &state() {
  if (!S) {
    static std::once_flag AtFork;
    std::call_once(AtFork,
                   [] { pthread_atfork(forkPrepare, forkParent, forkChild); });
    S = new State();
  }
  return *S;
}

} // namespace

bool scheduleTierUp(std::shared_ptr<CheckTarget> Target, GuardJIT &Engine,
                    GuardJIT *Then) {
  State &St = state();
  drainGraveyard();
  {
    std::lock_guard<std::mutex> G(St.Lock);
    if (St.Stopped)
      return false;
    ++St.Stats.Scheduled;
    ++St.Stats.Pending;
    if (!St.Pool)
      St.Pool = new llvm::StdThreadPool(llvm::hardware_concurrency(1));
  }
  post(std::move(Target), &Engine, Then);
  return true;
}

bool waitTierUp(double TimeoutS) {
  State &St = state();
  bool Empty;
  Py_BEGIN_ALLOW_THREADS;
  {
    std::unique_lock<std::mutex> G(St.Lock);
    auto Done = [&] { return St.Stats.Pending == 0; };
    if (TimeoutS < 0)
      St.Idle.wait(G, Done);
    else
      St.Idle.wait_for(G, std::chrono::duration<double>(TimeoutS), Done);
    Empty = Done();
  }
  Py_END_ALLOW_THREADS;
  drainGraveyard();
  return Empty;
}

TierUpStats tierUpStats() {
  State &St = state();
  std::lock_guard<std::mutex> G(St.Lock);
  return St.Stats;
}

void stopTierUp() {
  State &St = state();
  {
    std::lock_guard<std::mutex> G(St.Lock);
    St.Stopped = true;
  }
  // Queued jobs now return at once; the running one finishes.
  if (St.Pool) {
    Py_BEGIN_ALLOW_THREADS;
    St.Pool->wait();
    Py_END_ALLOW_THREADS;
  }
  drainGraveyard();
}

} // namespace guardjit

//===- TierUp.cpp - Recompile hot checks off the calling thread -----------===//
#include "guardjit/Check/TierUp.h"

#include "guardjit/Check/Log.h"

#include <Python.h>
#include <pthread.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace guardjit {
namespace {

using Clock = std::chrono::steady_clock;

/// Everything the worker shares with the GIL holder. Allocated once per
/// process (and again in a fork child) and never freed: the worker thread
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
  /// Jobs in order; one thread runs them, started at the first schedule()
  /// and never a second.
  std::deque<std::function<void()>> Queue;
  std::condition_variable Work;
  bool Started = false;
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

#if PY_VERSION_HEX < 0x030C0000
} // namespace
} // namespace guardjit
// CPython 3.11's own entry point (exported, declared only in its internal
// headers). Py_AddPendingCall there reads the GIL holder's thread state
// without the GIL to find the interpreter: from a thread with no thread
// state that races with another thread deleting its own (PyGILState_Release)
// and can read a freed one. 3.12 takes the main interpreter instead.
extern "C" int _PyEval_AddPendingCall(PyInterpreterState *Interp,
                                      int (*Func)(void *), void *Arg);
namespace guardjit {
namespace {
#endif

/// Asks the main interpreter to run drainPendingCall. Any thread, no GIL
/// and no thread state needed; Python must not be finalized.
bool addDrainCall() {
#if PY_VERSION_HEX < 0x030C0000
  return _PyEval_AddPendingCall(PyInterpreterState_Main(), drainPendingCall,
                                nullptr) == 0;
#else
  return Py_AddPendingCall(drainPendingCall, nullptr) == 0;
#endif
}

/// Hands the worker's reference to the GIL holder and counts the job done,
/// in one step: a thread waiting for the target (waitTarget) finds it in
/// the graveyard. Worker thread, no GIL.
void finishJob(std::shared_ptr<CheckTarget> T, bool Dropped, bool Failed,
               double Ms, std::string Error) {
  {
    std::lock_guard<std::mutex> G(S->Lock);
    --T->PendingJobs;
    if (Failed)
      T->LastCompileError = Error;
    S->Graveyard.push_back(std::move(T));
    // Scheduled under the lock, before Pending drops: stopTierUp() waits on
    // this lock for Pending == 0, so once it returns (and the host may
    // finalize Python) no worker adds a pending call any more. Needs
    // neither the GIL nor a thread state. On failure (the queue of pending
    // calls is full) the next schedule()/wait() drains instead.
    if (!S->DrainScheduled && !S->Stopped && addDrainCall())
      S->DrainScheduled = true;
    --S->Stats.Pending;
    S->Stats.Dropped += Dropped;
    S->Stats.Failed += Failed;
    S->Stats.Installed += !Dropped && !Failed;
    S->Stats.CompileMs += Ms;
    if (Failed)
      S->Stats.LastError = std::move(Error);
    S->Idle.notify_all();
  }
}

void workerLoop(State *St) {
  for (;;) {
    std::function<void()> Job;
    {
      std::unique_lock<std::mutex> G(St->Lock);
      St->Work.wait(G, [&] { return !St->Queue.empty(); });
      Job = std::move(St->Queue.front());
      St->Queue.pop_front();
    }
    Job();
  }
}

void runJob(std::shared_ptr<CheckTarget> T, std::shared_ptr<CodeProvider> P,
            std::shared_ptr<CodeProvider> Then);

/// Queues a job. Either thread, S->Lock held; the caller has counted it as
/// pending.
void post(std::shared_ptr<CheckTarget> T, std::shared_ptr<CodeProvider> P,
          std::shared_ptr<CodeProvider> Then) {
  ++T->PendingJobs;
  S->Queue.push_back([T = std::move(T), P = std::move(P),
                      Then = std::move(Then)]() mutable {
    runJob(std::move(T), std::move(P), std::move(Then));
  });
  if (!S->Started) {
    S->Started = true;
    std::thread(workerLoop, S).detach();
  }
  S->Work.notify_one();
}

void runJob(std::shared_ptr<CheckTarget> T, std::shared_ptr<CodeProvider> P,
            std::shared_ptr<CodeProvider> Then) {
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
  std::string Error;
  std::shared_ptr<CheckCode> New = P->compile(*T->Bound, &Error);
  double Ms =
      std::chrono::duration<double, std::milli>(Clock::now() - Start).count();
  if (!New) {
    Busy.unlock();
    return finishJob(std::move(T), false, /*Failed=*/true, Ms,
                     std::move(Error));
  }
  if (checkLogEnabled(CheckLogLevel::Debug)) { // thread-safe, no GIL (Log.h)
    CodeStats St = New->stats();
    char Ms[96];
    std::snprintf(Ms, sizeof(Ms), "%.2f ms lowering + %.2f ms LLVM",
                  St.LowerMs, St.CompileMs);
    checkLog(CheckLogLevel::Debug,
             "guard set " + T->Bound->set().name() + ": " +
                 std::to_string(St.NumGuards) + " guards compiled at " +
                 P->levelName() + " in the background (" +
                 std::to_string(St.NumInlined) + " inlined, " +
                 std::to_string(St.NumHelpers) + " helper calls) in " + Ms);
  }
  if (T->Distrusted) { // read without the GIL: at worst one more compile
    Busy.unlock();
    return finishJob(std::move(T), /*Dropped=*/true, false, Ms, "");
  }
  installCode(*T, std::move(New), /*Verify=*/true);
  Busy.unlock();
  // The next level, as its own job: a unit compiled at the default tier is
  // recompiled at the tier-up level only after every earlier job ran, so a
  // burst of new units all get their first code before any tier-up.
  if (Then && Then->level() > P->level()) {
    std::lock_guard<std::mutex> G(S->Lock);
    if (!S->Stopped) {
      ++S->Stats.Scheduled;
      ++S->Stats.Pending;
      post(T, std::move(Then), nullptr);
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

bool scheduleTierUp(std::shared_ptr<CheckTarget> Target,
                    std::shared_ptr<CodeProvider> Provider,
                    std::shared_ptr<CodeProvider> Then, bool HoldsGil) {
  State &St = state();
  if (HoldsGil)
    drainGraveyard();
  std::lock_guard<std::mutex> G(St.Lock);
  if (St.Stopped)
    return false;
  ++St.Stats.Scheduled;
  ++St.Stats.Pending;
  post(std::move(Target), std::move(Provider), std::move(Then));
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

bool waitTarget(const CheckTarget &T, double TimeoutS) {
  State &St = state();
  std::unique_lock<std::mutex> G(St.Lock);
  auto Done = [&] { return T.PendingJobs == 0; };
  if (TimeoutS < 0)
    St.Idle.wait(G, Done);
  else
    St.Idle.wait_for(G, std::chrono::duration<double>(TimeoutS), Done);
  return Done();
}

std::string targetCompileError(const CheckTarget &T) {
  State &St = state();
  std::lock_guard<std::mutex> G(St.Lock);
  return T.LastCompileError;
}

void drainTierUp() {
  if (S)
    drainGraveyard();
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
  Py_BEGIN_ALLOW_THREADS;
  {
    std::unique_lock<std::mutex> G(St.Lock);
    St.Idle.wait(G, [&] { return St.Stats.Pending == 0; });
  }
  Py_END_ALLOW_THREADS;
  drainGraveyard();
}

} // namespace guardjit

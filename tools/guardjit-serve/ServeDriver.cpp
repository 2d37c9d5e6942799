//===- ServeDriver.cpp - guardjit-serve's command line --------------------===//
//
//   guardjit-serve BUNDLE --requests FILE [--out FILE] [--json]
//                  [--trust-select] [--fallback=ARTIFACT]
//                  [--global-state=FILE] [--grad-mode] [--num-runners=N]
//                  [--threads=N [--repeat=K]] [--bench=N [--rounds=R]]
//
// 1. load the bundle (ServeHost::create),
// 2. read the requests: a file `torch.save` wrote (or torch::pickle_save) of
//    a list whose items are a tensor or a list of tensors (one per manifest
//    input), read by torch::pickle_load: no Python,
// 3. serve each: a line per request (the artifact, or the miss and its
//    failing guards), outputs to --out (torch.load reads them: per request a
//    tuple of output tensors, empty for a miss),
// 4. with --threads N: every request served again from N threads at once,
//    answers compared with the sequential ones (exit 1 if any differs);
//    with --bench N: R interleaved rounds, each timing N passes over the
//    requests that hit, phase by phase (describe, select, full, pick, run,
//    serve); medians and min-max per request.
// --json prints one JSON object with all of it instead of text.
//
//===----------------------------------------------------------------------===//
#include "ServeDriver.h"
#include "ServeHost.h"

#include <torch/csrc/jit/serialization/pickle.h>

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <chrono>
#include <exception>
#include <atomic>
#include <map>
#include <thread>

using namespace guardjit;
using namespace guardjit::serve;

namespace {

namespace cl = llvm::cl;

cl::OptionCategory Cat("guardjit-serve options");
cl::opt<std::string> BundleDir(cl::Positional, cl::Required,
                               cl::desc("<bundle directory>"), cl::cat(Cat));
cl::opt<std::string> RequestsFile("requests", cl::Required,
                                  cl::desc("requests: torch.save of a list of "
                                           "tensors / lists of tensors"),
                                  cl::value_desc("file"), cl::cat(Cat));
cl::opt<std::string> OutFile("out", cl::desc("write outputs (torch.load reads "
                                             "them) to this file"),
                             cl::value_desc("file"), cl::cat(Cat));
cl::opt<bool> Json("json", cl::desc("print a JSON report on stdout"),
                   cl::cat(Cat));
cl::opt<bool> TrustSelect(
    "trust-select",
    cl::desc("dispatch on the select set alone, skip the full check "
             "(unsafe: the analogue of skip_guard_eval_unsafe)"),
    cl::cat(Cat));
cl::opt<std::string> Fallback(
    "fallback",
    cl::desc("when no select set passes, try this artifact's full set"),
    cl::value_desc("artifact"), cl::cat(Cat));
cl::opt<std::string> GlobalState(
    "global-state",
    cl::desc("GlobalStateGuard JSON to start the host record from "
             "(default: the bundle's global_state.json)"),
    cl::value_desc("file"), cl::cat(Cat));
cl::opt<bool> GradMode("grad-mode", cl::init(false),
                       cl::desc("serve with grad mode on (default off; the "
                                "bundle's GLOBAL_STATE guard must agree)"),
                       cl::cat(Cat));
cl::opt<unsigned> NumRunners("num-runners", cl::init(1),
                             cl::desc("AOTInductor runners per package"),
                             cl::cat(Cat));
cl::opt<unsigned> Threads(
    "threads", cl::init(1),
    cl::desc("also serve every request from N threads at once, "
             "--repeat times each, and compare with the sequential answers"),
    cl::value_desc("N"), cl::cat(Cat));
cl::opt<unsigned> Repeat("repeat", cl::init(20),
                         cl::desc("passes per thread with --threads"),
                         cl::cat(Cat));
cl::opt<unsigned> Bench("bench", cl::init(0),
                        cl::desc("time N passes over the hits per round"),
                        cl::value_desc("N"), cl::cat(Cat));
cl::opt<unsigned> Rounds("rounds", cl::init(15),
                         cl::desc("benchmark rounds (the first 2 are warm-up)"),
                         cl::cat(Cat));

llvm::Error fail(const llvm::Twine &Msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), Msg);
}

llvm::Expected<std::vector<std::vector<at::Tensor>>>
readRequests(const std::string &Path) {
  auto Buf = llvm::MemoryBuffer::getFile(Path, /*IsText=*/false);
  if (!Buf)
    return fail(Path + ": " + Buf.getError().message());
  std::vector<char> Data((*Buf)->getBufferStart(), (*Buf)->getBufferEnd());
  std::vector<std::vector<at::Tensor>> Out;
  try {
    c10::IValue V = torch::jit::pickle_load(Data);
    if (!V.isList())
      return fail(Path + ": expected a list of requests");
    for (const c10::IValue &R : V.toListRef()) {
      std::vector<at::Tensor> Req;
      if (R.isTensor()) {
        Req.push_back(R.toTensor());
      } else if (R.isList() || R.isTuple()) {
        auto Items = R.isList() ? R.toListRef().vec()
                                : R.toTupleRef().elements().vec();
        for (const c10::IValue &T : Items) {
          if (!T.isTensor())
            return fail(Path + ": request " + llvm::Twine(Out.size()) +
                        ": expected tensors");
          Req.push_back(T.toTensor());
        }
      } else {
        return fail(Path + ": request " + llvm::Twine(Out.size()) +
                    ": expected a tensor or a list of tensors");
      }
      Out.push_back(std::move(Req));
    }
  } catch (const std::exception &E) {
    return fail(Path + ": cannot read: " + exceptionMessage(E));
  }
  return Out;
}

llvm::Error writeOutputs(const std::string &Path,
                         const std::vector<std::vector<at::Tensor>> &Outs) {
  // A tuple of tuples of tensors, a miss an empty tuple: lists would
  // pickle with type tags, which torch.load(weights_only=True) refuses.
  std::vector<c10::IValue> L;
  for (const std::vector<at::Tensor> &O : Outs)
    L.push_back(c10::ivalue::Tuple::create(
        std::vector<c10::IValue>(O.begin(), O.end())));
  std::vector<char> Data;
  try {
    Data = torch::jit::pickle_save(c10::ivalue::Tuple::create(std::move(L)));
  } catch (const std::exception &E) {
    return fail(Path + ": cannot pickle the outputs: " + exceptionMessage(E));
  }
  std::error_code EC;
  llvm::raw_fd_ostream OS(Path, EC, llvm::sys::fs::OF_None);
  if (EC)
    return fail(Path + ": " + EC.message());
  OS.write(Data.data(), Data.size());
  return llvm::Error::success();
}

/// Serves every request `Repeat` times from `Threads` threads at once and
/// counts answers that differ from the sequential pass (artifact, miss or
/// error, and outputs compared exactly): ServeHost's thread contract.
llvm::json::Object
concurrent(const ServeHost &H, const std::vector<std::vector<at::Tensor>> &Reqs,
           const std::vector<std::vector<at::Tensor>> &Outs,
           const std::vector<Decision> &Decs,
           const std::vector<std::string> &Errors) {
  std::atomic<size_t> Served{0}, Mismatches{0};
  std::vector<std::thread> Pool;
  for (unsigned T = 0; T < Threads; ++T) {
    Pool.emplace_back([&, T] {
      for (unsigned K = 0; K < Repeat; ++K) {
        for (size_t J = 0; J < Reqs.size(); ++J) {
          // Each thread walks the requests from another start.
          size_t I = (J + T) % Reqs.size();
          Decision Dec;
          auto O = H.serve(Reqs[I], &Dec);
          ++Served;
          bool Same;
          if (!O) {
            Same = !llvm::toString(O.takeError()).empty() && !Errors[I].empty();
          } else {
            Same = Errors[I].empty() && Dec.Artifact == Decs[I].Artifact &&
                   O->size() == Outs[I].size();
            for (size_t N = 0; Same && N < O->size(); ++N)
              Same = (*O)[N].equal(Outs[I][N]);
          }
          if (!Same)
            ++Mismatches;
        }
      }
    });
  }
  for (std::thread &T : Pool)
    T.join();
  return llvm::json::Object{{"threads", static_cast<int64_t>(Threads)},
                            {"served", static_cast<int64_t>(Served.load())},
                            {"mismatches", static_cast<int64_t>(Mismatches.load())}};
}

using Clock = std::chrono::steady_clock;

struct Stat {
  double Median = 0, Min = 0, Max = 0;
};

Stat stat(std::vector<double> V) {
  Stat S;
  if (V.empty())
    return S;
  std::sort(V.begin(), V.end());
  S.Median = V.size() % 2 ? V[V.size() / 2]
                          : (V[V.size() / 2 - 1] + V[V.size() / 2]) / 2;
  S.Min = V.front();
  S.Max = V.back();
  return S;
}

/// Times the phases of serving the hits, interleaved in rounds. Each phase's
/// result is consumed so the work cannot be dropped.
llvm::Expected<llvm::json::Object>
bench(const ServeHost &H, const std::vector<std::vector<at::Tensor>> &Reqs,
      const std::vector<Decision> &Decs) {
  std::vector<size_t> Hits;
  for (size_t I = 0; I < Reqs.size(); ++I)
    if (Decs[I].Artifact >= 0)
      Hits.push_back(I);
  if (Hits.empty())
    return fail("--bench: no request hits an artifact");
  std::vector<Described> Ds(Reqs.size());
  for (size_t I : Hits)
    if (llvm::Error E = H.describe(Reqs[I], &Ds[I]))
      return E;
  std::vector<size_t> MissReqs;
  std::vector<Described> MissDs;
  for (size_t I = 0; I < Reqs.size(); ++I) {
    if (Decs[I].Artifact >= 0)
      continue;
    MissDs.emplace_back();
    if (llvm::Error E = H.describe(Reqs[I], &MissDs.back())) {
      // A request the host cannot describe is not timed.
      llvm::consumeError(std::move(E));
      MissDs.pop_back();
    }
  }
  // pick_miss: pick() over the misses (every select set fails), per miss.
  const char *Phases[] = {"describe", "select", "full", "pick",
                          "run",      "serve",  "pick_miss"};
  std::map<std::string, std::vector<double>> Ns;
  size_t Sink = 0;
  unsigned N = Bench;
  for (unsigned R = 0; R < Rounds; ++R) {
    for (const char *Phase : Phases) {
      std::string P = Phase;
      if (P == "pick_miss") {
        if (MissDs.empty())
          continue;
        auto T0 = Clock::now();
        for (unsigned K = 0; K < N; ++K) {
          for (const Described &D : MissDs) {
            auto Dec = H.pick(D);
            if (!Dec)
              return Dec.takeError();
            Sink += Dec->Why.size();
          }
        }
        double Elapsed =
            std::chrono::duration<double, std::nano>(Clock::now() - T0).count();
        if (R >= 2 || Rounds <= 2)
          Ns[P].push_back(Elapsed / (double(N) * MissDs.size()));
        continue;
      }
      auto T0 = Clock::now();
      for (unsigned K = 0; K < N; ++K) {
        for (size_t I : Hits) {
          size_t A = static_cast<size_t>(Decs[I].Artifact);
          if (P == "describe") {
            Described D;
            if (llvm::Error E = H.describe(Reqs[I], &D))
              return E;
            Sink += D.Tensors.size();
          } else if (P == "select") {
            auto S = H.selectOnly(Ds[I]);
            if (!S)
              return S.takeError();
            Sink += *S;
          } else if (P == "full") {
            auto F = H.checkFull(A, Ds[I], nullptr);
            if (!F)
              return F.takeError();
            Sink += *F;
          } else if (P == "pick") {
            auto D = H.pick(Ds[I]);
            if (!D)
              return D.takeError();
            Sink += D->Artifact;
          } else if (P == "run") {
            auto O = H.run(A, Reqs[I]);
            if (!O)
              return O.takeError();
            Sink += O->size();
          } else {
            Decision Dec;
            auto O = H.serve(Reqs[I], &Dec);
            if (!O)
              return O.takeError();
            Sink += O->size();
          }
        }
      }
      double Elapsed =
          std::chrono::duration<double, std::nano>(Clock::now() - T0).count();
      if (R >= 2 || Rounds <= 2)
        Ns[P].push_back(Elapsed / (double(N) * Hits.size()));
    }
  }
  llvm::json::Object PerRequest;
  for (const char *Phase : Phases) {
    if (Ns[Phase].empty())
      continue;
    Stat S = stat(Ns[Phase]);
    PerRequest[Phase] =
        llvm::json::Object{{"median", S.Median}, {"min", S.Min}, {"max", S.Max}};
  }
  // Per-round ratio of the whole request to the package call alone (the
  // same round, interleaved): what the check adds, robust to load drifts.
  std::vector<double> Ratio;
  for (size_t K = 0; K < Ns["serve"].size() && K < Ns["run"].size(); ++K)
    Ratio.push_back(Ns["serve"][K] / Ns["run"][K]);
  Stat R = stat(Ratio);
  Stat Serve = stat(Ns["serve"]);
  llvm::json::Object Out{
      {"rounds", static_cast<int64_t>(Rounds)},
      {"warmup_rounds", Rounds > 2 ? 2 : 0},
      {"passes_per_round", static_cast<int64_t>(N)},
      {"hit_requests", static_cast<int64_t>(Hits.size())},
      {"miss_requests", static_cast<int64_t>(MissDs.size())},
      {"ns_per_request", std::move(PerRequest)},
      {"requests_per_second", Serve.Median > 0 ? 1e9 / Serve.Median : 0.0},
      {"serve_over_run",
       llvm::json::Object{{"median", R.Median}, {"min", R.Min}, {"max", R.Max}}},
      {"sink", static_cast<int64_t>(Sink % 2)}};
  return Out;
}

} // namespace

int guardjit::serve::serveMain(int Argc, char **Argv) {
  llvm::ExitOnError ExitOnErr("guardjit-serve: error: ");
  cl::HideUnrelatedOptions(Cat);
  cl::ParseCommandLineOptions(
      Argc, Argv,
      "guardjit-serve: serve AOTInductor packages behind portable guard "
      "sets, without Python\n");
  ServeOptions Opts;
  Opts.TrustSelect = TrustSelect;
  Opts.Fallback = Fallback;
  Opts.GlobalStateFile = GlobalState;
  Opts.NumRunners = NumRunners;
  Opts.GradMode = GradMode;
  // 1. Load.
  auto T0 = Clock::now();
  std::unique_ptr<ServeHost> H = ExitOnErr(ServeHost::create(BundleDir, Opts));
  double LoadMs =
      std::chrono::duration<double, std::milli>(Clock::now() - T0).count();
  // 2. Requests.
  auto Reqs = ExitOnErr(readRequests(RequestsFile));
  // 3. Serve.
  std::vector<std::vector<at::Tensor>> Outs(Reqs.size());
  std::vector<Decision> Decs(Reqs.size());
  // A request that cannot be served (wrong arity, an undefined tensor, the
  // package's run failing) is an error of that request: the others are
  // still served, and the exit status is 1.
  std::vector<std::string> Errors(Reqs.size());
  size_t Misses = 0, NumErrors = 0;
  for (size_t I = 0; I < Reqs.size(); ++I) {
    auto O = H->serve(Reqs[I], &Decs[I]);
    if (!O) {
      Errors[I] = llvm::toString(O.takeError());
      Decs[I] = Decision();
      ++NumErrors;
      continue;
    }
    Outs[I] = std::move(*O);
    Misses += Decs[I].Artifact < 0;
  }
  if (!OutFile.empty())
    ExitOnErr(writeOutputs(OutFile, Outs));
  // 4. Threads, bench.
  std::optional<llvm::json::Object> ThreadsOut;
  size_t ThreadMismatches = 0;
  if (Threads > 1) {
    ThreadsOut = concurrent(*H, Reqs, Outs, Decs, Errors);
    ThreadMismatches = static_cast<size_t>(*ThreadsOut->getInteger("mismatches"));
  }
  std::optional<llvm::json::Object> BenchOut;
  if (Bench)
    BenchOut = ExitOnErr(bench(*H, Reqs, Decs));

  if (!Json) {
    for (size_t I = 0; I < Reqs.size(); ++I) {
      const Decision &D = Decs[I];
      llvm::outs() << "request " << I << ": ";
      if (!Errors[I].empty())
        llvm::outs() << "error: " << Errors[I] << "\n";
      else if (D.Artifact < 0)
        llvm::outs() << "miss: " << D.Why << "\n";
      else
        llvm::outs() << H->artifacts()[D.Artifact].Name
                     << (D.ViaFallback ? " (fallback)" : "") << "\n";
    }
    llvm::outs() << Reqs.size() << " requests, " << Misses << " misses";
    if (NumErrors)
      llvm::outs() << ", " << NumErrors << " errors";
    llvm::outs() << "\n";
    if (ThreadsOut)
      llvm::outs() << Threads << " threads: " << *ThreadsOut->getInteger("served")
                   << " requests served, " << ThreadMismatches
                   << " answers differ from the sequential pass\n";
    if (BenchOut)
      llvm::outs() << llvm::formatv("{0:2}", llvm::json::Value(std::move(*BenchOut)))
                   << "\n";
    return NumErrors || ThreadMismatches ? 1 : 0;
  }
  llvm::json::Array ReqJ;
  for (size_t I = 0; I < Decs.size(); ++I) {
    const Decision &D = Decs[I];
    llvm::json::Object O;
    if (!Errors[I].empty()) {
      O["artifact"] = nullptr;
      O["error"] = Errors[I];
    } else if (D.Artifact < 0) {
      O["artifact"] = nullptr;
      O["why"] = D.Why;
    } else {
      O["artifact"] = H->artifacts()[D.Artifact].Name;
      O["via_fallback"] = D.ViaFallback;
    }
    ReqJ.push_back(std::move(O));
  }
  llvm::json::Array Names;
  for (const auto &A : H->artifacts())
    Names.push_back(A.Name);
  llvm::json::Object Report{
      {"model", H->model()},
      {"artifacts", std::move(Names)},
      {"trust_select", static_cast<bool>(TrustSelect)},
      {"guards", llvm::json::Object{
                     {"select", static_cast<int64_t>(H->numSelectGuards())},
                     {"full", static_cast<int64_t>(H->numFullGuards())}}},
      {"load_ms", LoadMs},
      {"requests", std::move(ReqJ)},
      {"misses", static_cast<int64_t>(Misses)},
      {"errors", static_cast<int64_t>(NumErrors)}};
  if (ThreadsOut)
    Report["concurrent"] = std::move(*ThreadsOut);
  if (BenchOut)
    Report["bench"] = std::move(*BenchOut);
  llvm::outs() << llvm::formatv("{0:2}", llvm::json::Value(std::move(Report)))
               << "\n";
  return NumErrors || ThreadMismatches ? 1 : 0;
}

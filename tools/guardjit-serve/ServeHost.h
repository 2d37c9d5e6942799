//===- ServeHost.h - AOTInductor packages behind portable guards -*- C++ -*-===//
//
// The library half of tools/guardjit-serve: loads a serve bundle (the
// `guardjit-serve/1` manifest, docs/serving.md) — several
// AOTInductor `.pt2` packages of one model and their portable guard sets —
// and serves requests: describe each input tensor as a DLTensor + TensorExt,
// pick the artifact with the bundle's `select` sets, check that artifact's
// full portable set, run its package. No CPython in the process: the guard
// check is GuardjitPortable (include/guardjit/portable.h), the model is
// libtorch's AOTIModelPackageLoader.
//
// What the host vouches for, since no Python exists to ask: every input is
// a plain at::Tensor (Python type "torch.Tensor"), the object at its
// manifest source; its dispatch keys are the tensor's key set with this
// thread's local include/exclude sets applied (as Dynamo's LocalState does);
// requires_grad and the storage offset are read from the tensor. The global
// record is the bundle's `global_state.json` (or `--global-state FILE`) with
// the fields libtorch can read overwritten by this process's values
// (num_threads, default_dtype, deterministic_algorithms[_warn_only]) and
// grad_mode by the mode run() serves in (ServeOptions::GradMode).
// Autocast and torch-function state keep the recorded values: the host does
// not read them (torch-function modes exist only in Python; an embedder
// that turns autocast on around pick() is outside what the check covers).
//
// Ownership: ServeHost owns its loaders and guard sets. Tensors passed in are
// borrowed for the call; outputs are new tensors owned by the caller.
// Threads: after create(), describe/pick/check are const and may run on any
// number of threads. serve() calls AOTIModelPackageLoader::run, which the
// loader serializes across its runners (ServeOptions::NumRunners).
// Errors: no exceptions leave this class; libtorch's c10::Error becomes an
// llvm::Error with its message. A guard miss is not an error: it is a
// Decision with Artifact < 0 and the failing guard in Why.
//
//===----------------------------------------------------------------------===//
#ifndef GUARDJIT_TOOLS_SERVE_SERVEHOST_H
#define GUARDJIT_TOOLS_SERVE_SERVEHOST_H

#include "guardjit/portable.h"

#include <ATen/Tensor.h>

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <exception>
#include <memory>
#include <string>
#include <vector>

namespace torch::inductor {
class AOTIModelPackageLoader;
} // namespace torch::inductor

namespace guardjit {
namespace serve {

struct ServeOptions {
  /// Dispatch on the select set alone: the full set is not checked (the
  /// host's analogue of torch's skip_guard_eval_unsafe stance). Unsafe: a
  /// request that differs from the artifact in a guard outside the select
  /// set reaches the package.
  bool TrustSelect = false;
  /// An artifact name: when no artifact is picked, the request is checked
  /// against this artifact's full set (always, even with TrustSelect) and
  /// dispatched there if it passes. Empty: a miss is a miss. An artifact
  /// the manifest's select section does not list (a catch-all package, e.g.
  /// with dynamic shapes) is reached only this way.
  std::string Fallback;
  /// A GlobalStateGuard JSON file to start the host record from; empty:
  /// the bundle's (the manifest's "global_state", default
  /// global_state.json). Without either, a set with GLOBAL_STATE makes
  /// every request an error.
  std::string GlobalStateFile;
  /// Grad mode the host serves in: run() sets it (c10::AutoGradMode) on the
  /// calling thread for the package call, and the global record says so.
  /// Off by default: a serving host computes no gradients, and bundles are
  /// exported under torch.no_grad().
  bool GradMode = false;
  /// AOTIModelPackageLoader's num_runners (concurrent run() calls).
  unsigned NumRunners = 1;
};

/// A request described for the portable check: per input a DLTensor and a
/// TensorExt, whose data, shape and strides point into the borrowed
/// at::Tensor (valid while it lives). Inline storage: describing a request
/// of up to 4 inputs allocates nothing. A DLPack host fills one itself.
struct Described {
  llvm::SmallVector<DLTensor, 4> Tensors;
  llvm::SmallVector<portable::TensorExt, 4> Exts;
};

/// What the host decided for one request.
struct Decision {
  int Artifact = -1;     ///< index into artifacts(); < 0: a miss
  bool ViaFallback = false;
  std::string Why;       ///< a miss: the failing guard(s), per artifact
};

/// Whether the bytes the elements of `A` and `B` occupy overlap (strides in
/// elements, NULL strides = compact row-major, as DLPack; no elements = no
/// bytes). A request whose input a package writes must not overlap another
/// input: eager reads the other before the write, the package after it.
bool bytesOverlap(const DLTensor &A, const DLTensor &B);

/// An exception's message; for c10::Error without its C++ backtrace.
std::string exceptionMessage(const std::exception &E);

class ServeHost {
public:
  /// A loaded set and, for each of its inputs, the manifest input it reads.
  struct GuardSet {
    std::unique_ptr<portable::PortableSet> Set;
    std::vector<unsigned> InputOf;
  };
  struct Artifact {
    std::string Name;
    std::unique_ptr<torch::inductor::AOTIModelPackageLoader> Loader;
    GuardSet Full;
    GuardSet Select; ///< Select.Set may be null (no select section)
    /// Manifest inputs the package writes in place ("mutates"): a request
    /// where one overlaps another input in memory is refused (eager would
    /// read the other before the write, the package after it).
    std::vector<unsigned> Mutates;
  };

  /// Loads the bundle in `Dir`: manifest, guard sets (with
  /// keep_portable_guards_unsafe), global record, every package. Errors name
  /// the file and what is wrong.
  static llvm::Expected<std::unique_ptr<ServeHost>>
  create(llvm::StringRef Dir, const ServeOptions &Opts);
  ~ServeHost();

  const std::vector<Artifact> &artifacts() const { return Artifacts; }
  const std::vector<portable::InputInfo> &inputs() const { return Inputs; }
  const std::string &model() const { return Model; }
  size_t numSelectGuards() const;
  size_t numFullGuards() const;

  /// Describes `Tensors` (one per manifest input, in order) into *Out. An
  /// error when the count differs or a tensor is undefined.
  llvm::Error describe(const std::vector<at::Tensor> &Tensors,
                       Described *Out) const;
  /// Picks the artifact: select sets in manifest order (full sets when the
  /// bundle has no select section), then the chosen artifact's full set
  /// unless TrustSelect (on a full miss the next artifacts are tried), then
  /// the fallback. A miss names every failing guard, per artifact.
  llvm::Expected<Decision> pick(const Described &D) const;
  /// The first artifact whose select set passes (full set when the bundle
  /// has none), or -1: the first step of pick(), for benchmarks.
  llvm::Expected<int> selectOnly(const Described &D) const;
  /// Checks artifact `I`'s full set alone (benchmarks).
  llvm::Expected<bool> checkFull(size_t I, const Described &D,
                                 std::string *Why) const;
  /// Runs artifact `I`'s package.
  llvm::Expected<std::vector<at::Tensor>>
  run(size_t I, const std::vector<at::Tensor> &Tensors) const;
  /// describe + pick + run. On a miss, *Dec has Artifact < 0 and the result
  /// is empty.
  llvm::Expected<std::vector<at::Tensor>>
  serve(const std::vector<at::Tensor> &Tensors, Decision *Dec) const;

private:
  ServeHost() = default;
  /// pick() without building miss messages when `Why` is null.
  llvm::Expected<Decision> pickImpl(const Described &D,
                                    std::string *Why) const;
  llvm::Expected<bool> check(const GuardSet &S, const Described &D,
                             std::string *Why) const;
  /// False (with *Why) when an input artifact `A` writes overlaps another
  /// input's bytes.
  bool writesDoNotOverlap(const Artifact &A, const Described &D,
                          std::string *Why) const;
  llvm::Error loadSets(llvm::StringRef Dir, llvm::StringRef File,
                       std::vector<std::unique_ptr<portable::PortableSet>> *Out);
  llvm::Expected<GuardSet>
  takeSet(std::vector<std::unique_ptr<portable::PortableSet>> &Sets,
          llvm::StringRef Name, llvm::StringRef File);

  ServeOptions Opts;
  std::string Model;
  std::vector<portable::InputInfo> Inputs;
  std::vector<Artifact> Artifacts;
  bool HasSelect = false; ///< the manifest has a select section
  int FallbackIndex = -1;
  std::unique_ptr<portable::GlobalStateRecord> Global;
};

} // namespace serve
} // namespace guardjit

#endif // GUARDJIT_TOOLS_SERVE_SERVEHOST_H

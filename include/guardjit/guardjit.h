//===- guardjit.h - Embedding API for serving hosts -------------*- C++ -*-===//
//
// The stable C++ facade for hosts that embed CPython and want to check a
// saved guard set (.gir text) natively before they dispatch a request to a
// compiled artifact. No LLVM, pybind11 or Python.h type appears here: Python
// objects are `void *` (a `PyObject *`), and every class is a pimpl.
// The walk-through is docs/embedding.md; its example compiles as a test.
//
// Lifecycle of a set:   load -> bind -> [compile] -> check* -> evict
//
//  - load:    parse and verify .gir text (errors carry file:line:col), and
//             check the `gir torch=".." guardjit=".."` header against the
//             versions this library was built for.
//  - bind:    give every object table entry its live Python object, through
//             a host callback or by name (ObjectInfo::Name, docs/embedding.md
//             "Naming scheme").
//  - compile: native code through LLVM ORC, blocking or on a background
//             thread. A bound set is checkable at once: until its code is
//             ready, check() runs guardjit's interpreter (same answers). In
//             the background the code of RuntimeOptions::Level comes first,
//             then that of TierUpLevel is swapped in.
//  - check:   1 / 0 per call; never raises into Python. The first call of
//             each new code also runs the interpreter (probation): on a
//             disagreement the code is dropped for good and the
//             interpreter's answer stands (SetStats::Distrusted).
//  - [enableSubtreeSkip]: with frame locals the set passes on, later checks
//             skip every guard that "these dicts and types are unchanged"
//             implies (docs/subtree-skipping.md), falling back to the full
//             check whenever one changed.
//  - evict:   frees the code and the references; the set then refuses every
//             call with ErrorCode::Evicted.
//
// Thread and GIL contract:
//  - The host initializes CPython (Py_Initialize) before creating a Runtime
//    and keeps it alive until every Runtime and LoadedSet is destroyed.
//  - With the GIL held: Runtime::create (with EnableTorch), LoadedSet::bind*,
//    check, checkArgs, evict, and destroying a bound LoadedSet.
//  - With the GIL held, before the set is checked: enableSubtreeSkip.
//  - Without the GIL (any thread): Runtime::load, LoadedSet::compile and
//    waitForCode (never hold the GIL while waiting: the background compile
//    never needs it, but your other threads may), name, objects.
//  - With or without the GIL (any thread): stats. It takes the GIL for a
//    moment to read the counters check() writes under it, so do not call it
//    from a thread that holds a lock a GIL holder waits for.
//  - compile, waitForCode and stats may run while another thread evicts the
//    set: evict waits for them (and they then see the set evicted).
//  - Background compiles run on one compile thread of the embedding library
//    (a host that also imports the Python plugin has the plugin's thread
//    beside it: each is linked with its own copy); it never takes the GIL. The
//    references it lets go of are dropped by the next GIL holder (a CPython
//    pending call, or evict()). Destroy every LoadedSet before Py_Finalize.
//  - One LoadedSet may be checked by several threads (each holding the GIL
//    in turn, as CPython requires); evict and destroy must not run
//    concurrently with a check of the same set.
//
// Pointer lifetimes:
//  - `void *` objects passed to bind are borrowed for the duration of the
//    call; guardjit takes its own strong reference to each, held until
//    evict() or destruction. (Stricter than Dynamo, which does not keep
//    ID_MATCH objects alive: a host cannot observe the object dying, so
//    guardjit prevents address reuse instead.)
//  - `FrameLocals` / `Args` passed to check are borrowed for the call.
//  - References and pointers returned by accessors (name(), objects(),
//    Status::message()) live as long as the object they come from.
//  - A LoadedSet keeps its Runtime's engine alive; destroying the Runtime
//    first is allowed.
//
// Errors: every fallible call returns a Status; misuse (unbound objects,
// wrong arity, a call after evict, a set from another torch version,
// malformed text) is an error, never a crash or an exception.
//
//===----------------------------------------------------------------------===//
#ifndef GUARDJIT_GUARDJIT_H
#define GUARDJIT_GUARDJIT_H

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace guardjit {
namespace embed {

/// The torch and guardjit versions this library was built for (what a .gir
/// header must name unless LoadOptions overrides it).
const char *torchVersion();
const char *guardjitVersion();

enum class ErrorCode : int {
  Ok = 0,
  ParseError,      ///< malformed or invalid .gir (message has file:line:col)
  VersionMismatch, ///< the header names another torch / guardjit, or none
  Unbound,         ///< an object table entry has no object (or not yet bound)
  InvalidArgument, ///< null pointer, wrong arity, wrong type of object
  Evicted,         ///< the set was evicted
  CompileFailed,   ///< LLVM could not compile the set (check still works)
  Unsupported,     ///< e.g. a torch guard without EnableTorch
  Internal,
};

/// The outcome of a call: Ok, or an error code and a message (lower case,
/// located where the input had a location).
class Status {
public:
  Status() = default;
  Status(ErrorCode Code, std::string Message)
      : Code(Code), Message(std::move(Message)) {}
  static Status success() { return Status(); }
  bool ok() const { return Code == ErrorCode::Ok; }
  explicit operator bool() const { return ok(); }
  ErrorCode code() const { return Code; }
  const std::string &message() const { return Message; }

private:
  ErrorCode Code = ErrorCode::Ok;
  std::string Message;
};

/// Code level of the native check (see docs/performance.md): Light compiles
/// in a few ms per 100 guards; O1 is the background tier's level.
enum class CodeLevel : int { O0, Light, O1, O2 };

struct RuntimeOptions {
  /// The code a compile produces first (blocking: the only one).
  CodeLevel Level = CodeLevel::Light;
  /// After a background compile at Level, the set is recompiled at this
  /// level on the compile thread and the new code swapped in, when it is
  /// higher than Level (set it to Level for one compile only).
  CodeLevel TierUpLevel = CodeLevel::O1;
  /// Install the ATen-backed checks (TENSOR_MATCH, GLOBAL_STATE,
  /// TORCH_FUNCTION_MODE_STACK). Requires the GIL and `import torch` done in
  /// this interpreter. Without it, binding a set with such a guard fails
  /// with ErrorCode::Unsupported.
  bool EnableTorch = false;
  /// The on-disk object cache (docs/object-cache.md): a directory where
  /// compiled sets are kept for the next process, "off" for none, empty
  /// for what the GUARDJIT_CACHE_DIR environment variable says (unset: none).
  std::string CacheDir;
};

struct LoadOptions {
  /// Name of the text in messages ("model.gir" -> "model.gir:3:7: error:").
  std::string BufferName = "<string>";
  /// Accept a header naming another torch or guardjit version, or no
  /// header at all. The check is then only as good as that torch's guard
  /// semantics match this one's: for tests and deliberate migrations.
  bool AllowVersionMismatch = false;
  /// Guard IR passes run on each set before it is bound, in guard-ir-opt's
  /// -passes= syntax (docs/passes.md), e.g. "default" (sound structural
  /// passes) or "keep_portable_guards_unsafe" (torch's filter: drops
  /// guards). Empty: none; the set is checked as recorded.
  std::string Passes;
};

/// One object table entry of a loaded set, as a binder sees it.
struct ObjectInfo {
  uint32_t Index;          ///< `#N` in the text
  std::string_view Kind;   ///< "type", "object", "constant", "callable",
                           ///< "dict", "key" or "state"
  std::string_view Repr;   ///< the recorded repr (a description only)
  std::string_view Name;   ///< binding name (`name=".."`), "" when absent
};

/// Returns the object for an entry: a borrowed `PyObject *`, or nullptr to
/// leave it unbound (bind then fails with ErrorCode::Unbound naming it).
/// Called with the GIL held, once per entry, in index order.
using BindCallback = std::function<void *(const ObjectInfo &)>;

/// Per-set counters and compile results.
struct SetStats {
  size_t Guards = 0;         ///< guards in the set
  size_t Objects = 0;        ///< object table entries
  uint64_t Checks = 0;       ///< calls of check / checkArgs that ran
  uint64_t Hits = 0;         ///< ... that passed
  uint64_t Misses = 0;       ///< ... that failed
  bool Native = false;       ///< native code is installed (else interpreter)
  CodeLevel Level = CodeLevel::O0; ///< of the installed code (when Native)
  double CompileMs = 0;      ///< lowering + LLVM of the newest code (ms),
                             ///< 0 until compiled
  size_t InlinedGuards = 0;  ///< guards emitted inline by the JIT
  size_t HelperGuards = 0;   ///< guards emitted as runtime helper calls
  /// First calls of new code that also ran the interpreter (one per code
  /// installed and called).
  uint64_t Probations = 0;
  /// New code disagreed with the interpreter on its first call and was
  /// dropped: the interpreter checks the set from then on.
  bool Distrusted = false;
  bool SubtreeSkip = false;     ///< enabled and not given up
  uint64_t SkipHits = 0;        ///< checks answered by the residual check
  uint64_t SkipFallbacks = 0;   ///< ... that found a change: full check
  bool ResidualNative = false;  ///< the residual check has native code
};

class LoadedSet;

/// One per host (or per model): owns the JIT engine and its compile thread.
class Runtime {
public:
  /// Creates a runtime. Fails when LLVM cannot target this host, or with
  /// EnableTorch when torch is not imported.
  static Status create(const RuntimeOptions &Opts,
                       std::unique_ptr<Runtime> *Out);
  ~Runtime();
  Runtime(const Runtime &) = delete;
  Runtime &operator=(const Runtime &) = delete;

  /// Parses and verifies `GirText` (every `guard_set` in it, in file order;
  /// `code_object` blocks are refused) and checks its version header.
  /// Appends the sets to *Out, unbound. No GIL needed.
  Status load(std::string_view GirText, const LoadOptions &Opts,
              std::vector<std::unique_ptr<LoadedSet>> *Out);
  /// load() of a file's contents; BufferName defaults to the path.
  Status loadFile(const std::string &Path, LoadOptions Opts,
                  std::vector<std::unique_ptr<LoadedSet>> *Out);

  struct Impl;

private:
  explicit Runtime(std::shared_ptr<Impl> I);
  std::shared_ptr<Impl> I;
};

/// A guard set loaded from text: bind it, then check it.
class LoadedSet {
public:
  ~LoadedSet(); ///< evicts (GIL held if the set was bound)
  LoadedSet(const LoadedSet &) = delete;
  LoadedSet &operator=(const LoadedSet &) = delete;

  /// The set's name (Dynamo's compile id, e.g. "0/0").
  const std::string &name() const;
  /// Its object table, for binders.
  const std::vector<ObjectInfo> &objects() const;
  /// The frame-local names the set reads, in frame-locals index order: what
  /// checkArgs expects, one object each.
  const std::vector<std::string> &argumentNames() const;

  /// Binds every entry through `Callback`. GIL held. A set is bound once:
  /// binding again is InvalidArgument.
  Status bind(const BindCallback &Callback);
  /// Binds every entry by its name: `Objects[name]` (borrowed PyObject*),
  /// then, with `ResolvePython`, the `py:` and `lit:` names this library
  /// resolves itself by importing / evaluating literals in the embedded
  /// interpreter (docs/embedding.md). GIL held.
  Status bindByName(const std::map<std::string, void *> &Objects,
                    bool ResolvePython = true);

  /// Compiles the bound set to native code. Blocking: returns when the code
  /// is installed (or failed). Background: returns at once; the code is
  /// swapped in atomically when ready (RuntimeOptions::Level, then
  /// TierUpLevel), and check() runs the interpreter meanwhile. With subtree
  /// skipping, the residual check is compiled in the background either
  /// way. A second call does nothing. No GIL needed (and never hold it in
  /// waitForCode).
  Status compile(bool Background = false);
  /// Waits until no background compile of this set is queued or running;
  /// returns CompileFailed with the message of the newest that failed (the
  /// set keeps the code it had), else Ok (also when none was started).
  Status waitForCode();

  /// Gives the set sound subtree skipping, planned on `FrameLocals`
  /// (borrowed dict; frame locals the set passes on). Unsupported, with the
  /// reason, when the set has nothing to skip or a guard it cannot skip
  /// soundly; the set is then checked in full, as before. Skipping starts
  /// once the residual check is native (at once while the set itself is
  /// interpreted) and turns itself off for a set whose objects keep
  /// changing. With `CostModel`, also unsupported when the skipping check
  /// is not estimated clearly cheaper than the full one (a small set).
  /// GIL held; call after bind, before the set is checked.
  Status enableSubtreeSkip(void *FrameLocals, bool CostModel = true);

  /// Checks the frame locals dict `FrameLocals` (borrowed `PyObject *` of a
  /// dict: the callee's locals by name). *Pass receives the answer. GIL held.
  Status check(void *FrameLocals, bool *Pass);
  /// Checks positional arguments, named by argumentNames() in order (builds
  /// the frame-locals dict: ~100 ns more than check()). `NumArgs` must equal
  /// argumentNames().size(). GIL held.
  Status checkArgs(void *const *Args, size_t NumArgs, bool *Pass);

  SetStats stats() const;
  /// Where the interpreter fails on `FrameLocals` ("" when it passes), for
  /// a host's miss report. GIL held.
  Status explain(void *FrameLocals, std::string *Where);

  /// Frees the native code and releases every reference. GIL held (when
  /// bound); waits for a background compile first. Idempotent.
  void evict();
  bool evicted() const;

  struct Impl;

private:
  friend class Runtime;
  explicit LoadedSet(std::unique_ptr<Impl> I);
  std::unique_ptr<Impl> I;
};

} // namespace embed
} // namespace guardjit

#endif // GUARDJIT_GUARDJIT_H

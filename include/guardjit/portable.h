//===- portable.h - Guard sets checked with no Python at all ----*- C++ -*-===//
//
// For hosts that run ahead-of-time compiled models without CPython: a guard
// set reduced by `keep_portable_guards_unsafe` (GLOBAL_STATE, SHAPE_ENV and
// the TENSOR_MATCH guards of non-global tensors) is checked against DLPack
// `DLTensor` descriptions of the inputs plus a record of the global state
// in the form of Dynamo's GlobalStateGuard JSON. The library behind this
// header (GuardjitPortable) links no libpython.
//
// DLPack: include/guardjit/dlpack/dlpack.h is torch 2.13.0's
// ATen/dlpack.h, DLPack 1.3 (DLPACK_MAJOR_VERSION / DLPACK_MINOR_VERSION),
// copied verbatim (a test compares it with the installed torch's).
//
// What each guard compares (docs/embedding.md, "Portable checks"):
//  - TENSOR_MATCH: dtype (DLDataType <-> c10::ScalarType), device type and
//    index (DLDevice <-> the backend of the recorded dispatch keys; torch's
//    CPU index -1 is DLPack's device_id 0), ndim, sizes and strides (NULL
//    strides = compact row-major, as DLPack defines), static dims only.
//    DLTensor cannot describe requires_grad, the dispatch key set or the
//    Python type (Tensor vs Parameter vs a subclass): a TensorExt beside the
//    tensor supplies them and they are compared exactly; without one the
//    check is weaker (those three are not compared).
//  - SHAPE_ENV: the same expression the interpreter evaluates, over sizes,
//    strides and storage offsets read from the DLTensors (the storage
//    offset from TensorExt, else byte_offset / item size) and over scalar
//    inputs. Where int64 / double cannot decide, the guard fails: there is
//    no Python fallback here.
//  - GLOBAL_STATE: every field of the recorded JSON against the host's
//    record, with torch's rule that an autocast dtype is ignored when
//    autocast is off on both sides.
//  - NO_TENSOR_ALIASING: two inputs with the same data pointer and byte
//    offset are the same tensor (fails); different pointers pass. Weaker
//    than torch, which compares TensorImpl identity.
//  - DIMENSION_DYNAMIC_MARKING: passes: a DLTensor carries none of the
//    Python attributes (`_dynamo_dynamic_indices`...) it tests, exactly as
//    a tensor never marked with torch._dynamo.mark_dynamic.
// Any other guard kind makes load() fail with the guard's location.
//
// The inputs the host supplies are the values those guards read, named by
// Dynamo source (e.g. "L['x']", "L['self']._modules['fc']._parameters['w']")
// in the order of inputs(). The accessor path leading to them (module
// attributes, dict items) is not checked: the host vouches that each input
// is the object at that source.
//
// Threads: a loaded PortableSet and a GlobalStateRecord are immutable;
// check() may run on any number of threads at once. Pointers passed to
// check() are borrowed for the call.
//
//===----------------------------------------------------------------------===//
#ifndef GUARDJIT_PORTABLE_H
#define GUARDJIT_PORTABLE_H

#include "guardjit/dlpack/dlpack.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace guardjit {
namespace portable {

/// What DLTensor cannot say. Fill every field (zero-initialize, then set).
struct TensorExt {
  /// sizeof(TensorExt) as the host compiled it (for later extensions).
  uint32_t StructSize = sizeof(TensorExt);
  int32_t RequiresGrad = 0;
  /// LocalState.apply(torch._C._dispatch_keys(t)).raw_repr(): the tensor's
  /// dispatch key set with the thread's included / excluded keys applied.
  uint64_t DispatchKeys = 0;
  /// The Python type's qualified name: "torch.Tensor",
  /// "torch.nn.parameter.Parameter", or a subclass's.
  const char *PythonType = "torch.Tensor";
  /// tensor.storage_offset() in elements.
  int64_t StorageOffset = 0;
};

enum class InputKind : uint8_t { Tensor, Int, Float };

/// One input: a tensor (Tensor, Ext optional) or a scalar.
struct Input {
  const DLTensor *Tensor = nullptr;
  const TensorExt *Ext = nullptr;
  int64_t Int = 0;
  double Float = 0;
};

/// What the set needs for input i, in order.
struct InputInfo {
  std::string Source; ///< Dynamo source, e.g. "L['x']"
  InputKind Kind;
};

/// A parsed GlobalStateGuard JSON record (the host's current global state).
class GlobalStateRecord {
public:
  /// Parses `Json` (GlobalStateGuard.__getstate__()'s form). False with
  /// *Error on malformed JSON or a missing field.
  static bool parse(std::string_view Json, GlobalStateRecord *Out,
                    std::string *Error);
  GlobalStateRecord();
  ~GlobalStateRecord();
  GlobalStateRecord(GlobalStateRecord &&);
  GlobalStateRecord &operator=(GlobalStateRecord &&);
  struct Impl;
  const Impl &impl() const { return *I; }

private:
  std::unique_ptr<Impl> I;
};

/// A portable guard set: load, then check.
class PortableSet {
public:
  /// Parses and verifies .gir text (all sets in it, appended to *Out in file
  /// order). With `RunFilter` (default) keep_portable_guards_unsafe runs
  /// first; either way a guard the portable check cannot evaluate is an
  /// error `file:line:col: error: ...` at that guard. Unless
  /// `AllowVersionMismatch`, the `gir` header must name `TorchVersion`
  /// (nullptr: the torch this library was built for).
  static bool load(std::string_view GirText, std::string_view BufferName,
                   std::vector<std::unique_ptr<PortableSet>> *Out,
                   std::string *Error, bool RunFilter = true,
                   bool AllowVersionMismatch = false,
                   const char *TorchVersion = nullptr);
  ~PortableSet();

  const std::string &name() const;
  const std::vector<InputInfo> &inputs() const;
  size_t numGuards() const;

  /// Checks `Inputs` (exactly inputs().size() of them, in that order)
  /// against the set; `Global` is required when the set has GLOBAL_STATE.
  /// Returns false with *Error on misuse (wrong arity, a null tensor, a
  /// missing global record); otherwise true with the answer in *Pass.
  /// When *Pass is false and `Why` is given, it names the first failing
  /// guard.
  bool check(const Input *Inputs, size_t NumInputs,
             const GlobalStateRecord *Global, bool *Pass, std::string *Error,
             std::string *Why = nullptr) const;

  struct Impl;

private:
  explicit PortableSet(std::unique_ptr<Impl> I);
  std::unique_ptr<Impl> I;
};

/// The torch version this library checks (a .gir header must name it).
const char *torchVersion();

} // namespace portable
} // namespace guardjit

#endif // GUARDJIT_PORTABLE_H

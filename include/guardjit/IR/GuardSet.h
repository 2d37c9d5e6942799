//===- GuardSet.h - Guard IR for one compile unit ---------------*- C++ -*-===//
//
// The Guard IR of one compile unit (one Dynamo cache entry): a tree of values
// produced by accessors from the frame locals `L`, leaf guards that test
// values, relational guards that read several values, and root guards over
// ambient state. Python constants are referenced through an object table.
//
// The IR is plain data with no Python or LLVM types: an object table entry
// carries a printable description and, once bound, an opaque address that
// the Runtime layer interprets as a `PyObject*`.
//
// Semantics (docs/guard-semantics.md): the check passes iff every value can be
// read and every guard passes; order never changes the answer.
//
//===----------------------------------------------------------------------===//
#ifndef GUARDJIT_IR_GUARDSET_H
#define GUARDJIT_IR_GUARDSET_H

#include "guardjit/IR/KindFacts.h"
#include "guardjit/IR/ShapeExpr.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace guardjit {

// AccessorKind, GuardKind and what each kind is (guardArity,
// guardReadsObject, accessorReadsKey, ...): IR/KindFacts.h.

/// Spelling used by the .gir printer, e.g. "dict_get_item".
std::string_view spelling(AccessorKind K);
std::string_view spelling(GuardKind K);
/// Dynamo's name for the kind, e.g. "TENSOR_MATCH".
std::string_view torchName(GuardKind K);
std::optional<AccessorKind> parseAccessorKind(std::string_view S);

std::optional<GuardKind> parseGuardKind(std::string_view S);

using ValueId = uint32_t;
using ObjectId = uint32_t;
constexpr uint32_t InvalidId = ~uint32_t(0);

/// A source location in the user's program (from Dynamo's user_stack).
struct UserLoc {
  std::string File;
  uint32_t Line = 0;
  bool empty() const { return File.empty(); }
};

// ObjectKind: IR/KindFacts.h.

/// Spelling used by the .gir printer, e.g. "type".
std::string_view spelling(ObjectKind K);
std::optional<ObjectKind> parseObjectKind(std::string_view S);

/// One Python constant referenced by the IR.
struct ObjectEntry {
  ObjectKind Kind = ObjectKind::Object;
  /// Human-readable description, e.g. "<class 'torch.Tensor'>" or "0.5".
  std::string Repr;
  /// Whether the binding holds a strong reference (Dynamo keeps EQUALS_MATCH
  /// constants, dict keys and callables alive; ID/TYPE_MATCH objects are not
  /// kept alive: Dynamo invalidates the cache entry when they die).
  bool Strong = false;
  /// Address of the bound object (a `PyObject*`), 0 when unbound (parsed IR).
  uintptr_t Address = 0;
  /// Binding name (`name="..."` in .gir, empty when absent): how a host that
  /// loads the text finds the object, e.g. "py:torch.Tensor" or "lit:'x'"
  /// (the scheme is in docs/embedding.md). Not part of the IR's meaning.
  std::string Name = {};
};

/// A value produced by an accessor from its parent value.
struct Value {
  AccessorKind Kind = AccessorKind::Root;
  ValueId Parent = InvalidId; ///< InvalidId only for the root
  std::string Name;           ///< local / attribute name
  int64_t Index = -1;         ///< framelocals index, item or dict index
  /// The object the runtime needs: the name (a str) for FrameLocal, GetAttr
  /// and GenericGetAttr; the key for DictGetItem and GetItem; the f_globals
  /// dict for Globals; the default of ContextVarGet (InvalidId: none).
  ObjectId Key = InvalidId;
  std::string Source;         ///< Dynamo source, e.g. "L['x']"
  /// Index into GuardSet::origins(): the Dynamo guard whose create() made
  /// this value (InvalidId for values made while no guard was being created,
  /// or by walking a path, or in hand-written IR). It matters for a value
  /// that carries no guard and has no child: Dynamo's HASATTR guard makes
  /// just the accessor (the read itself is the check), and a guard filter
  /// drops the accessor iff it drops that guard.
  uint32_t Origin = InvalidId;
};

/// TENSOR_MATCH parameters, as torch's TensorCheck stores them.
struct TensorSpec {
  ObjectId PyType = InvalidId;   ///< exact Python type (Tensor vs Parameter)
  uint64_t DispatchKeys = 0;     ///< LocalState.apply(keys).raw_repr()
  int8_t DType = 0;              ///< c10::ScalarType
  int8_t DeviceIndex = -1;       ///< c10::DeviceIndex
  bool RequiresGrad = false;
  std::vector<std::optional<int64_t>> Sizes;   ///< nullopt = dynamic dim
  std::vector<std::optional<int64_t>> Strides; ///< nullopt = dynamic dim
};

/// The Dynamo guard (`torch._guards.Guard`) a leaf guard was built from: the
/// fields of torch's `GuardFilterEntry` (torch/_guards.py, built by
/// `make_guard_filter_entry` in torch/_dynamo/guards.py) that `guard_filter_fn`
/// filters read. One Dynamo guard expands into one or more IR guards; a filter
/// keeps or drops them together.
struct GuardOrigin {
  std::string GuardType; ///< `guard_type`: create_fn_name(), e.g. "TENSOR_MATCH"
  std::string Name;      ///< `name`: source name, local scope stripped
  /// `derived_guard_types`, e.g. {"ID_MATCH"} for a module's NN_MODULE guard.
  std::vector<std::string> DerivedGuardTypes;
  bool HasValue = false;         ///< `has_value`
  bool IsGlobal = false;         ///< `is_global`
  bool ValueIsParameter = false; ///< isinstance(value, torch.nn.Parameter)
  /// `orig_guard.source.is_unspecialized_nn_module()`
  bool UnspecializedNNModule = false;
  /// `orig_guard.source.is_unspecialized_builtin_nn_module()`
  bool UnspecializedBuiltinNNModule = false;
};

/// Where a guard comes from, for diagnostics and the printer.
struct GuardAttrs {
  std::string Source;       ///< e.g. "L['self'].layers[0].scale"
  UserLoc Loc;
  std::string VerboseCode;  ///< Dynamo's verbose code part
};

/// A leaf, relational, root or epilogue guard.
struct Guard {
  GuardKind Kind = GuardKind::TypeMatch;
  std::vector<ValueId> Operands; ///< empty for root guards
  /// type / object / constant / callable / dict key / attribute name (str)
  ObjectId Object = InvalidId;
  /// second object: DEFAULT_DEVICE's torch.utils._device module dict, or
  /// FAKE_SCRIPT_TYPE_MATCH's FakeScriptObject class
  ObjectId Aux = InvalidId;
  /// length, the bool of DICT_CONTAINS / SET_CONTAINS / COW_TENSOR_MATCH, a
  /// dual level, a raw dispatch key set, or STORAGE_OVERLAPPING's count of
  /// overlapping operands
  int64_t Int = 0;
  /// RANGE_ITERATOR_MATCH's [start, stop, step]; empty for every other kind
  std::vector<int64_t> Ints;
  std::string Str;               ///< serialized state (GLOBAL_STATE JSON)
  uint32_t Tensor = InvalidId;   ///< index into GuardSet::tensorSpecs()
  /// Index into GuardSet::origins(); InvalidId when Dynamo installed the guard
  /// outside any Guard's create() (torch's filters never see it: it stays).
  uint32_t Origin = InvalidId;
  /// SHAPE_ENV: the expression over the operands (empty for other kinds).
  ShapeExpr Expr;
  GuardAttrs Attrs;
};

/// The guard set of one compile unit.
class GuardSet {
public:
  explicit GuardSet(std::string Name = "unit");

  const std::string &name() const { return Name; }
  void setName(std::string N) { Name = std::move(N); }

  /// The root value (frame locals `L`) is always value 0.
  static constexpr ValueId root() { return 0; }

  ObjectId addObject(ObjectEntry E);
  /// Adds a value; its parent must already exist.
  ValueId addValue(Value V);
  /// Returns an existing value with the same accessor from the same parent,
  /// or adds it: each object is read once per call.
  ValueId getOrAddValue(Value V);
  uint32_t addTensorSpec(TensorSpec S);
  uint32_t addOrigin(GuardOrigin O);
  void addGuard(Guard G);

  const std::vector<ObjectEntry> &objects() const { return Objects; }
  std::vector<ObjectEntry> &objects() { return Objects; }
  const std::vector<Value> &values() const { return Values; }
  /// Raw access for the parser and passes: unlike addValue, nothing is
  /// checked, so the result may need the verifier (IR/Verifier.h).
  std::vector<Value> &values() { return Values; }
  const std::vector<Guard> &guards() const { return Guards; }
  std::vector<Guard> &guards() { return Guards; }
  const std::vector<TensorSpec> &tensorSpecs() const { return TensorSpecs; }
  std::vector<TensorSpec> &tensorSpecs() { return TensorSpecs; }
  const std::vector<GuardOrigin> &origins() const { return Origins; }
  std::vector<GuardOrigin> &origins() { return Origins; }

  const Value &value(ValueId Id) const { return Values[Id]; }
  const ObjectEntry &object(ObjectId Id) const { return Objects[Id]; }
  const TensorSpec &tensorSpec(uint32_t Id) const { return TensorSpecs[Id]; }

  /// Number of guards of each kind, indexed by GuardKind.
  std::vector<size_t> countByKind() const;

private:
  std::string Name;
  std::vector<ObjectEntry> Objects;
  std::vector<Value> Values;
  std::vector<TensorSpec> TensorSpecs;
  std::vector<GuardOrigin> Origins;
  std::vector<Guard> Guards;
};

} // namespace guardjit

#endif // GUARDJIT_IR_GUARDSET_H

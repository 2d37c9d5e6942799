"""Recorder: builds Guard IR from the calls Dynamo makes while building its tree.

Dynamo (torch/_dynamo/guards.py, GuardBuilder) builds each compile unit's guard
tree by calling methods of the pybind classes in ``torch._C._dynamo.guards``:
accessor methods (``framelocals_manager``, ``dict_getitem_manager``,
``get_generic_dict_manager`` ...) that return child managers, ``add_*_guard``
methods that add leaf guards, and ``install_*_guard`` functions for relational
guards. The recorder wraps those methods on the classes (the originals always
run first and their results are returned unchanged) and mirrors each call into
a :class:`guardjit._core.GuardSet`.

A call the recorder cannot represent marks the recording unsupported with a
reason; that compile unit then stays on Dynamo's own path. Recording errors are
never raised into Dynamo.

Thread safety: Dynamo compiles under its own global lock; the recorder assumes
one compile at a time (as Dynamo does).
"""

from __future__ import annotations

import dataclasses
import functools
import sys
import threading
from typing import Any

import torch
import torch._dynamo.guards as dynamo_guards
from torch._C._dynamo import guards as C

from guardjit import _compat, _core, shapes, stable_text
from guardjit import aliasing as aliasing_parts
from guardjit import lambdas

_GM = C.GuardManager
_DGM = C.DictGuardManager
_ROOT = C.RootGuardManager


@dataclasses.dataclass
class Recording:
    """The Guard IR recorded for one RootGuardManager."""

    root: Any  # the pybind RootGuardManager (kept alive while recording)
    ir: Any  # _core.GuardSet
    # id(manager) -> (manager, value id, example value); holding the manager
    # keeps pybind returning the same wrapper for the same C++ node.
    nodes: dict[int, tuple[Any, int, Any]] = dataclasses.field(default_factory=dict)
    # Objects whose addresses the IR holds, kept alive until the set is bound.
    keep: list[Any] = dataclasses.field(default_factory=list)
    # (kind, id(obj)) -> object table id
    objects: dict[tuple[str, int], int] = dataclasses.field(default_factory=dict)
    # The objects the IR borrows (strong=False: types and ID_MATCH objects,
    # as Dynamo borrows them); the stance re-reads the IR later and first
    # checks that they are still alive (stance.py).
    borrowed: list[Any] = dataclasses.field(default_factory=list)
    # (value id, guard kind) pairs Dynamo de-duplicates (SKIP_IF_GUARD_ALREADY_PRESENT),
    # with the origins that asked for that guard
    present: dict[tuple[int, str], set[int]] = dataclasses.field(default_factory=dict)
    unsupported: list[str] = dataclasses.field(default_factory=list)
    # Leaf guards per Dynamo guard kind, for the cross-check against the tree.
    recorded_kinds: dict[str, int] = dataclasses.field(default_factory=dict)
    # id(torch._guards.Guard) -> origin table id
    origins: dict[int, int] = dataclasses.field(default_factory=dict)

    def origin_id(self, origin: tuple[Any, tuple] | None) -> int:
        """The origin table id of the Dynamo guard being created, -1 outside
        any Guard.create() (guards torch's filters never see)."""
        if origin is None:
            return -1
        guard, fields = origin
        oid = self.origins.get(id(guard))
        if oid is None:
            oid = self.ir.add_origin(*fields)
            self.origins[id(guard)] = oid
            self.keep.append(guard)
        return oid
    # For SHAPE_ENV translation: source string -> value id (first value with
    # that source), value id -> example value, value id -> TENSOR_MATCH pytype,
    # (tensor value id, accessor, index) -> tensor property value id.
    by_source: dict[str, int] = dataclasses.field(default_factory=dict)
    # value id -> (accessor kind, parent value id, key) of the reads Dynamo's
    # tree makes (key: the local name, dict key or attribute name; None
    # otherwise): how the aliasing parts tell a read with Python's semantics
    # from one that bypasses them (aliasing.SourceReader).
    reads: dict[int, tuple[str, int, Any]] = dataclasses.field(default_factory=dict)
    # The reads the aliasing parts add (source text -> value id, and their
    # reads as above): later parts share them (docs/guard-semantics.md §12).
    aliasing_by_source: dict[str, int] = dataclasses.field(default_factory=dict)
    examples: dict[int, Any] = dataclasses.field(default_factory=dict)
    tensor_types: dict[int, Any] = dataclasses.field(default_factory=dict)
    tensor_props: dict[tuple[int, str, int], int] = dataclasses.field(default_factory=dict)
    # SHAPE_ENV code parts checked natively / left in a Python epilogue, and
    # why each of the latter was not translated.
    shape_parts_native: int = 0
    shape_parts_python: int = 0
    shape_python_reasons: list[str] = dataclasses.field(default_factory=list)
    # id(manager) of indexed_manager children: they stand for their parent's
    # value only as SYMBOLIC_SHAPE_GUARD feeders; a leaf guard there is refused.
    indexed: set[int] = dataclasses.field(default_factory=set)
    # id(manager) of managers below an empty DictGuardManager, which Dynamo
    # never checks, and the (id(manager), kind) of their leaf guards.
    dead: set[int] = dataclasses.field(default_factory=set)
    dead_guards: set[tuple[int, str]] = dataclasses.field(default_factory=set)
    # SHAPE_ENV guards waiting for the end of the build (_record_shape_env).
    pending_shapes: list[tuple] = dataclasses.field(default_factory=list)
    # Object-aliasing code parts read natively / left in Python (and why).
    aliasing_parts_native: int = 0
    aliasing_parts_python: int = 0
    aliasing_python_reasons: list[str] = dataclasses.field(default_factory=list)
    # id(f_globals dict) -> its globals value; values that are the result of
    # a call (tensor properties, call and lambda accessors), which an
    # aliasing part does not share with Dynamo's tree
    globals_values: dict[int, int] = dataclasses.field(default_factory=dict)
    fresh_values: set[int] = dataclasses.field(default_factory=set)

    def object_id(self, kind: str, obj: Any, strong: bool) -> int:
        key = (kind, id(obj))
        oid = self.objects.get(key)
        if oid is None:
            try:
                # No addresses or install paths: the same set prints the
                # same text in every process (stable_text.py).
                text = stable_text.normalize(repr(obj))
            except Exception:  # a user __repr__ may raise
                text = f"<{type(obj).__name__} object>"
            if len(text) > 200:
                text = text[:197] + "..."
            oid = self.ir.add_object(kind, obj, strong, text)
            self.objects[key] = oid
            self.keep.append(obj)
            if not strong:
                self.borrowed.append(obj)
        return oid

    def fail(self, reason: str) -> None:
        if reason not in self.unsupported:
            self.unsupported.append(reason)


class _State(threading.local):
    def __init__(self) -> None:
        self.recordings: dict[int, Recording] = {}  # id(root) -> Recording
        self.owner: dict[int, Recording] = {}  # id(manager) -> Recording
        # (Guard, add_origin arguments) of the Guard.create() running now
        # (None while GuardBuilder walks a path: see _track_guard_origins)
        self.origin: tuple[Any, tuple] | None = None
        # (code_parts, verbose_code_parts, scope) of the SHAPE_ENV lambda
        # being installed, consumed by the add_epilogue_lambda_guard it makes.
        self.shape: tuple[list[str], list[str], dict[str, Any]] | None = None
        # the same, also while walking a path: the guard that makes a value
        self.creating: tuple[Any, tuple] | None = None
        # id(Guard) -> (Guard, add_origin arguments after its first create()):
        # the entry torch's guard_filter_fn sees (it is built after the first
        # build; create() appends to Guard.guard_types), kept for the rebuild
        # torch does with the kept guards.
        self.settled: dict[int, tuple[Any, tuple]] = {}
        # (Guard, fields, [(code part, verbose part)], the builder's G scope)
        # of the guards that added object-aliasing code parts to the builder
        # (GuardBuilder.DUPLICATE_INPUT), in build order
        self.aliasing: list[tuple[Any, tuple, list, Any]] = []


_state = _State()
_installed = False
_originals: list[tuple[Any, str, Any]] = []


def reset() -> None:
    """Drops every recording in progress (releases the managers they hold)."""
    _state.recordings.clear()
    _state.owner.clear()
    _state.settled.clear()
    _state.aliasing.clear()


def take(root: Any) -> Recording | None:
    """Removes and returns the recording of ``root`` (a RootGuardManager),
    finished: the SHAPE_ENV code parts are translated now that every value
    of the tree exists (see _record_shape_env)."""
    rec = _state.recordings.pop(id(root), None)
    if rec is not None and rec.root is not root:
        return None
    if rec is not None:
        pending, rec.pending_shapes = rec.pending_shapes, []
        for args in pending:
            try:
                _translate_shape_env(rec, *args)
            except Exception as e:  # never raise into Dynamo: the unit falls back
                rec.fail(f"SHAPE_ENV: {type(e).__name__}: {e}")
    return rec


def forget(root: Any) -> None:
    """Drops the recording of ``root``, a RootGuardManager guardjit built
    itself (its guards go through the wrapped methods too)."""
    rec = _state.recordings.pop(id(root), None)
    if rec is not None:
        for key in [k for k, r in _state.owner.items() if r is rec]:
            del _state.owner[key]


def _recording_for(mgr: Any) -> Recording | None:
    rec = _state.owner.get(id(mgr))
    if rec is not None:
        return rec
    if isinstance(mgr, _ROOT):
        # A new build (CheckFunctionManager builds twice under a guard
        # filter): the aliasing guards of the last one do not carry over.
        _state.aliasing.clear()
        rec = Recording(root=mgr, ir=_core.GuardSet("unit"))
        rec.nodes[id(mgr)] = (mgr, 0, None)
        _state.recordings[id(mgr)] = rec
        _state.owner[id(mgr)] = rec
        return rec
    return None


def _node(rec: Recording, mgr: Any) -> tuple[int, Any]:
    entry = rec.nodes.get(id(mgr))
    if entry is None:
        raise LookupError("guard manager not created through a recorded accessor")
    return entry[1], entry[2]


def _user_loc(user_stack: Any) -> tuple[str, int]:
    try:
        if user_stack:
            frame = user_stack[-1]
            return str(frame.filename), int(frame.lineno or 0)
    except Exception:
        pass
    return "", 0


def _first(parts: Any) -> str:
    try:
        return str(parts[0]) if parts else ""
    except Exception:
        return ""


# --- accessors ---------------------------------------------------------------

# method name -> (IR accessor, parameter names in pybind order)
_ACCESSORS: dict[str, tuple[str, tuple[str, ...]]] = {
    "framelocals_manager": ("frame_local", ("key", "source", "example_value", "guard_manager_enum")),
    "globals_dict_manager": ("globals", ("f_globals", "source", "example_value", "guard_manager_enum")),
    "dict_getitem_manager": ("dict_get_item", ("key", "source", "example_value", "guard_manager_enum")),
    "get_generic_dict_manager": ("generic_dict", ("source", "example_value", "guard_manager_enum")),
    "getattr_manager": ("getattr", ("attr", "source", "example_value", "guard_manager_enum")),
    "generic_getattr_manager": ("generic_getattr", ("attr", "source", "example_value", "guard_manager_enum")),
    "code_manager": ("code", ("source", "example_value", "guard_manager_enum")),
    "type_manager": ("type", ("source", "example_value", "guard_manager_enum")),
    "tuple_getitem_manager": ("tuple_get_item", ("key", "source", "example_value", "guard_manager_enum")),
    "list_getitem_manager": ("list_get_item", ("key", "source", "example_value", "guard_manager_enum")),
    "getitem_manager": ("get_item", ("key", "source", "example_value", "guard_manager_enum")),
    "get_key_manager": ("dict_key", ("index", "source", "example_value", "guard_manager_enum")),
    "get_value_manager": ("dict_value", ("index", "source", "example_value", "guard_manager_enum")),
    "closure_manager": ("closure", ("source", "example_value", "guard_manager_enum")),
    "func_defaults_manager": ("func_defaults", ("source", "example_value", "guard_manager_enum")),
    "func_kwdefaults_manager": ("func_kwdefaults", ("source", "example_value", "guard_manager_enum")),
    "type_dict_manager": ("type_dict", ("source", "example_value", "guard_manager_enum")),
    "type_mro_manager": ("type_mro", ("source", "example_value", "guard_manager_enum")),
    "lambda_manager": ("lambda", ("python_lambda", "source", "example_value", "guard_manager_enum")),
    "call_function_no_args_manager": ("call_function_no_args",
                                      ("source", "example_value", "guard_manager_enum")),
    "weakref_call_manager": ("weakref_call", ("source", "example_value", "guard_manager_enum")),
    "global_weakref_manager": ("global_weakref",
                               ("global_name", "source", "example_value", "guard_manager_enum")),
    "grad_manager": ("grad", ("source", "example_value", "guard_manager_enum")),
    "set_getitem_manager": ("set_get_item",
                            ("index", "source", "example_value", "guard_manager_enum")),
    "tuple_iterator_getitem_manager": ("tuple_iterator_get_item",
                                       ("index", "source", "example_value",
                                        "guard_manager_enum")),
    # Built only for the C++ symbolic shape guard (install_symbolic_shape_guard).
    "tensor_property_size_manager": ("tensor_size",
                                     ("idx", "source", "example_value", "guard_manager_enum")),
    "tensor_property_stride_manager": ("tensor_stride",
                                       ("idx", "source", "example_value", "guard_manager_enum")),
    "tensor_property_storage_offset_manager": ("tensor_storage_offset",
                                               ("idx", "source", "example_value",
                                                "guard_manager_enum")),
    "indexed_manager": ("indexed", ("idx", "source", "example_value", "guard_manager_enum")),
}


def _bind_args(names: tuple[str, ...], args: tuple, kwargs: dict) -> dict[str, Any]:
    bound = dict(zip(names, args))
    bound.update(kwargs)
    return bound


def _on_accessor(method: str, mgr: Any, child: Any, args: tuple, kwargs: dict) -> None:
    rec = _recording_for(mgr)
    if rec is None:
        return
    if id(child) in rec.nodes:
        return  # Dynamo returned an existing child manager: already recorded
    kind, names = _ACCESSORS[method]
    a = _bind_args(names, args, kwargs)
    parent, parent_example = _node(rec, mgr)
    source = str(a.get("source", ""))
    example = a.get("example_value")
    if _never_checked(rec, mgr, parent_example):
        # Below an empty DictGuardManager: Dynamo never reads this value
        # (the manager returns after its type and size checks), so the IR
        # has no read for it. Its guards are counted, not recorded (_add).
        rec.nodes[id(child)] = (child, parent, example)
        rec.dead.add(id(child))
        _state.owner[id(child)] = rec
        return
    if kind == "indexed":
        # IndexedGuardAccessor hands SYMBOLIC_SHAPE_GUARD the pair (idx, value):
        # no read of its own, so its manager stands for the parent's value.
        rec.nodes[id(child)] = (child, parent, parent_example)
        rec.indexed.add(id(child))
        _state.owner[id(child)] = rec
        return
    if kind in ("tensor_size", "tensor_stride", "tensor_storage_offset"):
        idx = -1 if kind == "tensor_storage_offset" else int(a["idx"])
        vid = _tensor_property(rec, parent, kind, idx, source)
        rec.nodes[id(child)] = (child, vid, example)
        _state.owner[id(child)] = rec
        rec.by_source.setdefault(source, vid)
        rec.examples[vid] = example
        return
    name, index, key = "", -1, -1
    if kind == "frame_local":
        local_name, index = a["key"]
        name = str(local_name)
        key = rec.object_id("key", name, True)
    elif kind == "globals":
        key = rec.object_id("dict", a["f_globals"], True)
    elif kind in ("dict_get_item", "get_item"):
        k = a["key"]
        key = rec.object_id("key", k, True)
        name = k if isinstance(k, str) else ""
    elif kind in ("getattr", "generic_getattr"):
        name = str(a["attr"])
        key = rec.object_id("key", a["attr"], True)
    elif kind in ("tuple_get_item", "list_get_item"):
        index = int(a["key"])
    elif kind in ("dict_key", "dict_value", "set_get_item", "tuple_iterator_get_item"):
        index = int(a["index"])
    elif kind == "lambda":
        cv = lambdas.contextvar_get(a["python_lambda"])
        if cv is not None:
            # torch 2.14's ContextVarGetSource lambda, proven: read natively
            # (PyContextVar_Get); the default it captured is the key.
            kind = "contextvar_get"
            if cv.has_default:
                key = rec.object_id("constant", cv.default, True)
        else:
            # PythonLambdaGuardAccessor holds its callable: kept alive here too.
            key = rec.object_id("callable", a["python_lambda"], True)
    elif kind == "global_weakref":
        g = a["global_name"]
        key = rec.object_id("key", g, True)
        name = g if isinstance(g, str) else ""
    vid = rec.ir.add_value(kind, parent, source, name, index, key,
                           origin=rec.origin_id(_state.creating))
    read_key = {"frame_local": lambda: a["key"][0], "dict_get_item": lambda: a["key"],
                "get_item": lambda: a["key"], "getattr": lambda: a["attr"],
                "generic_getattr": lambda: a["attr"]}.get(kind)
    rec.reads[vid] = (kind, parent, read_key() if read_key else None)
    if kind == "globals":
        rec.globals_values.setdefault(id(a["f_globals"]), vid)
    elif kind in ("call_function_no_args", "lambda", "contextvar_get"):
        rec.fresh_values.add(vid)  # a call: Python's evaluation would call again
    rec.nodes[id(child)] = (child, vid, example)
    rec.by_source.setdefault(source, vid)
    rec.examples[vid] = example
    _state.owner[id(child)] = rec
    if isinstance(child, _DGM):
        # DictGuardManager itself checks the exact type and the size of the
        # dict before its key/value managers (DictGuardManager::check_nopybind).
        rec.ir.add_guard("type_match", [vid], object=rec.object_id("type", type(example), False),
                         source=source, verbose=f"DictGuardManager: type({source}) is dict")
        rec.ir.add_guard("dict_length", [vid], int=len(example), source=source,
                         verbose=f"DictGuardManager: len({source}) == {len(example)}")


# --- leaf guards -------------------------------------------------------------

def _obj_from_id(rec: Recording, vid: int, example: Any, obj_id: int, want_type: bool) -> Any:
    candidate = type(example) if want_type else example
    if id(candidate) == obj_id:
        return candidate
    raise LookupError(f"cannot recover the object of id {obj_id:#x}")


# Root guards over ambient state and epilogue guards (which receive the frame
# locals dict) have no operand value.
_NO_OPERAND = frozenset({"global_state", "default_device", "torch_function_mode_stack",
                         "epilogue_lambda", "dual_level_match", "saved_tensors_hooks"})


def _add(rec: Recording, mgr: Any, kind: str, torch_kind: str, parts: Any, stack: Any,
         dedup: bool = False, **fields: Any) -> None:
    vid, example = _node(rec, mgr)
    if id(mgr) in rec.indexed:
        rec.fail("leaf guards under an indexed_manager are not supported")
    if _never_checked(rec, mgr, example):
        # An empty DictGuardManager passes after its type and size checks
        # without running its leaves or its accessors (DictGuardManager::
        # check_nopybind: `if (_size == 0) return true;`): the guard is in
        # Dynamo's tree, but never checked. Counted for the cross-check, as
        # the tree holds it (once per manager for the kinds the C++ dedups).
        key = (id(mgr), torch_kind)
        if not (dedup and key in rec.dead_guards):
            rec.dead_guards.add(key)
            rec.recorded_kinds[torch_kind] = rec.recorded_kinds.get(torch_kind, 0) + 1
        return
    origin = rec.origin_id(_state.origin)
    duplicate = False
    if dedup:
        asked = rec.present.get((vid, torch_kind))
        if asked is not None:
            # Dynamo skips it. A second Dynamo guard asking for the same
            # check still gets its own copy in the IR: a guard filter may
            # drop the first one and keep this one, and then torch's rebuild
            # has the check (the dedup pass merges the copies).
            if origin in asked:
                return  # (-1 stands for a path guard, see get_guard_manager_from_source)
            duplicate = True
            asked.add(origin)
        else:
            rec.present[(vid, torch_kind)] = {origin}
    file, line = _user_loc(stack)
    source = rec.nodes[id(mgr)][0].get_source() if vid else "L"
    operands = [] if kind in _NO_OPERAND else [vid]
    rec.ir.add_guard(kind, operands, source=source, origin=origin,
                     file=file, line=line, verbose=_first(parts), **fields)
    if not duplicate:
        rec.recorded_kinds[torch_kind] = rec.recorded_kinds.get(torch_kind, 0) + 1


def _never_checked(rec: Recording, mgr: Any, example: Any) -> bool:
    """Whether Dynamo never runs what hangs below ``mgr`` (whose example
    value is ``example``): an empty DictGuardManager, or anything under one."""
    if id(mgr) in rec.dead:
        return True
    return isinstance(mgr, _DGM) and isinstance(example, dict) and dict.__len__(example) == 0


def _refuse_dead(rec: Recording, managers: Any, what: str) -> None:
    if any(id(m) in rec.dead for m in managers):
        raise LookupError(f"{what} over a value below an empty DictGuardManager")


def _leaf_type_match(rec, mgr, type_id, parts, stack):
    if isinstance(mgr, _DGM):
        return  # DictGuardManager ignores it: it checks the exact type itself
    vid, example = _node(rec, mgr)
    t = _obj_from_id(rec, vid, example, type_id, True)
    _add(rec, mgr, "type_match", "TYPE_MATCH", parts, stack, dedup=True,
         object=rec.object_id("type", t, False))


def _leaf_id_match(rec, mgr, obj_id, parts, stack):
    vid, example = _node(rec, mgr)
    o = _obj_from_id(rec, vid, example, obj_id, False)
    _add(rec, mgr, "id_match", "ID_MATCH", parts, stack, dedup=True,
         object=rec.object_id("object", o, False))


def _leaf_equals_match(rec, mgr, value, parts, stack):
    # EQUALS_MATCH keeps the object it is given (GuardBuilder already passes a
    # deep copy of list/set constants).
    _add(rec, mgr, "equals_match", "EQUALS_MATCH", parts, stack, dedup=True,
         object=rec.object_id("constant", value, True))


def _simple(kind: str, torch_kind: str, dedup: bool = False):
    def leaf(rec, mgr, parts, stack):
        _add(rec, mgr, kind, torch_kind, parts, stack, dedup=dedup)
    return leaf


def _leaf_length(kind: str, torch_kind: str):
    def leaf(rec, mgr, length, parts, stack):
        if kind == "dict_length" and isinstance(mgr, _DGM):
            return  # DictGuardManager ignores it: it checks the size itself
        _add(rec, mgr, kind, torch_kind, parts, stack, dedup=True, int=int(length))
    return leaf


def _leaf_dict_contains(rec, mgr, contains, key, parts, stack):
    _add(rec, mgr, "dict_contains", "DICT_CONTAINS", parts, stack,
         object=rec.object_id("key", key, True), int=1 if contains else 0)


def _leaf_no_hasattr(rec, mgr, attr, parts, stack):
    _add(rec, mgr, "no_hasattr", "NO_HASATTR", parts, stack,
         object=rec.object_id("key", attr, True))


def _leaf_lambda(rec, mgr, fn, parts, stack):
    cow = None if isinstance(mgr, _ROOT) else lambdas.cow_tensor_match(fn)
    if cow is not None:
        # torch 2.14's COW_TENSOR_MATCH lambda on a tensor's manager, proven
        # to be torch's template (guardjit/lambdas.py): checked natively.
        _add(rec, mgr, "cow_tensor_match", "LAMBDA_GUARD", parts, stack,
             int=1 if cow.expected else 0)
        return
    if isinstance(mgr, _ROOT):
        # torch's ambient AUTOGRAD_SAVED_TENSORS_HOOKS lambda, proven to be
        # torch's template (guardjit/lambdas.py): checked natively.
        hooks = lambdas.saved_tensors_hooks(fn)
        if hooks is not None:
            _add(rec, mgr, "saved_tensors_hooks", "LAMBDA_GUARD", parts, stack,
                 object=rec.object_id("type", hooks.graph_module, False),
                 int=0 if hooks.ids is None else 1,
                 ints=[] if hooks.ids is None else list(hooks.ids))
            return
    _add(rec, mgr, "lambda", "LAMBDA_GUARD", parts, stack,
         object=rec.object_id("callable", fn, True))


# The three root guards below are NOT de-duplicated by torch 2.13's C++
# (RootGuardManager keeps every add_global_state_guard /
# add_torch_function_mode_stack_guard / add_default_device_guard call:
# checked on the wheel, tests/python/test_whole_units.py). Dynamo adds a
# second TORCH_FUNCTION_STATE guard when the code runs a tensor subclass's
# or a mode's __torch_function__, so its tree then holds two
# TORCH_FUNCTION_MODE_STACK leaves; the IR keeps both, each with its origin.
def _leaf_global_state(rec, mgr, state, parts, stack):
    _add(rec, mgr, "global_state", "GLOBAL_STATE", parts, stack,
         str=state.__getstate__(), object=rec.object_id("state", state, True))


def _leaf_torch_function_mode_stack(rec, mgr, modes, parts, stack):
    types = tuple(type(m) for m in modes)
    _add(rec, mgr, "torch_function_mode_stack", "TORCH_FUNCTION_MODE_STACK", parts, stack,
         object=rec.object_id("constant", types, True))


def _leaf_default_device(rec, mgr, parts, stack):
    import torch.utils._device as utils_device

    _add(rec, mgr, "default_device", "DEFAULT_DEVICE", parts, stack,
         object=rec.object_id("constant", utils_device.CURRENT_DEVICE, True),
         aux=rec.object_id("dict", utils_device.__dict__, True))


def _python_keys() -> Any:
    ks = torch._C.DispatchKeySet(torch._C.DispatchKey.Python)
    for k in (torch._C.DispatchKey.PythonTLSSnapshot, torch._C.DispatchKey.PythonDispatcher):
        ks = ks.add(k)
    return ks


def _applied_keys(rec, keys) -> int:
    """LocalState.apply(keys).raw_repr(), as TensorCheck stores it when built:
    ((keys | tls_included) - tls_excluded) - {Python keys}, with
    DispatchKeySet's own operators (`-` keeps backend bits); the Python keys
    are masked unless this thread is in a dispatch mode without
    ignore_compile_internals."""
    get_local_state = getattr(rec.root, "get_local_state", None)
    if get_local_state is not None:
        # torch 2.14: the root's LocalState (set_local_state: a loaded
        # package's, saved with its guards), else this thread's; its pickled
        # fields are (included, excluded, override, grad_mode, mask_python).
        included, excluded, override, _grad, mask = get_local_state().__getstate__()
        return _core.apply_local_state(keys.raw_repr(), included, excluded, override, mask)
    # torch 2.13: this thread's state (the mode flag mirrored by _core).
    applied = (keys | torch._C._dispatch_tls_local_include_set()) \
        - torch._C._dispatch_tls_local_exclude_set()
    if _core.masks_python_keys():
        applied = applied - _python_keys()
    return applied.raw_repr()


def _leaf_tensor_match(rec, mgr, value, sizes, strides, name, parts, stack, pytype, keys):
    applied = _applied_keys(rec, keys)
    # An empty list means "the tensor's own sizes/strides" (pyListToVecOptInt).
    sizes = list(sizes) if len(sizes) or value.dim() == 0 else list(value.shape)
    strides = list(strides) if len(strides) or value.dim() == 0 else list(value.stride())
    spec = rec.ir.add_tensor_spec(value, rec.object_id("type", pytype, False), applied,
                                  sizes, strides)
    rec.tensor_types[_node(rec, mgr)[0]] = pytype
    _add(rec, mgr, "tensor_match", "TENSOR_MATCH", parts, stack, dedup=True, tensor=spec)


def _leaf_dimension_marking(rec, mgr, expected, absent, dependent, parts, stack):
    # One leaf guard; its payload is the tuple (expected_attrs: dict[str, set],
    # absent_attrs: list[str], dependent_attrs: dict[str, (value, gate)]).
    spec = (dict(expected), list(absent), dict(dependent))
    _add(rec, mgr, "dimension_marking", "DIMENSION_DYNAMIC_MARKING_GUARD", parts, stack,
         object=rec.object_id("constant", spec, True))


def _leaf_dict_version(rec, mgr, value, parts, stack):
    # DICT_VERSION stores the dict's ma_version_tag when it is built (this
    # hook runs right after), exactly what dict_version() reads.
    _add(rec, mgr, "dict_version", "DICT_VERSION", parts, stack, dedup=True,
         int=C.dict_version(value))


def _aliasing_part_guard(code_part: str, g_scope: Any) -> Any:
    """One code part as the function GuardBuilder.add_python_lambda_leaf_
    guard_to_root would build for it (same closure variables and globals)."""
    closure_vars = dynamo_guards._get_closure_vars()
    _body, pycode = dynamo_guards.build_guard_function(
        [code_part], ", ".join(closure_vars.keys()))
    out: dict[str, Any] = {}
    exec(pycode, {"G": g_scope}, out)  # noqa: S102 - torch's own guard code
    return out["___make_guard_fn"](*closure_vars.values())


def _leaf_epilogue_lambda(rec, mgr, fn, parts, stack):
    shape, _state.shape = _state.shape, None
    if shape is not None:
        return _record_shape_env(rec, mgr, fn, stack, *shape)
    # Dynamo's only epilogue lambda joins the object-aliasing code parts of
    # the DUPLICATE_INPUT guards built before (CheckFunctionManager.
    # compile_check_fn), `if not (part): return False` per part. A guard
    # filter keeps the parts of the kept guards, so the IR gets one lambda
    # per part, built the same way, with its guard's origin: their
    # conjunction is Dynamo's lambda, and a filter pass keeps exactly the
    # parts torch's rebuild joins.
    aliasing = list(_state.aliasing)
    codes = [c for a in aliasing for c in a[2]]
    if not aliasing or [v for _c, v in codes] != list(parts):
        _add(rec, mgr, "epilogue_lambda", "LAMBDA_GUARD", parts, stack,
             object=rec.object_id("callable", fn, True))
        return
    # Each part `b is a` becomes an object_aliasing guard over the two sides
    # read as IR values (guardjit/aliasing.py); a part whose sides cannot be
    # read natively stays a lambda of its own.
    before = dict(rec.recorded_kinds)
    outer = _state.origin
    try:
        for guard, fields, part_codes, g_scope in aliasing:
            for code_part, verbose in part_codes:
                _state.origin = (guard, fields)
                try:
                    _aliasing_guard(rec, guard, code_part, verbose, g_scope)
                    rec.aliasing_parts_native += 1
                    continue
                except aliasing_parts.Unsupported as e:
                    rec.aliasing_python_reasons.append(f"{code_part}: {e}")
                part_fn = _aliasing_part_guard(code_part, g_scope)
                _add(rec, mgr, "epilogue_lambda", "LAMBDA_GUARD", [verbose], stack,
                     object=rec.object_id("callable", part_fn, True))
                rec.aliasing_parts_python += 1
    finally:
        _state.origin = outer
    # Dynamo's tree has one lambda for all the parts.
    rec.recorded_kinds = before
    rec.recorded_kinds["LAMBDA_GUARD"] = before.get("LAMBDA_GUARD", 0) + 1


def _aliasing_guard(rec: Recording, guard: Any, code_part: str, verbose: str,
                    g_scope: Any) -> None:
    """Records the aliasing code part ``b is a`` of Dynamo guard ``guard`` as
    one object_aliasing guard, with the guard's origin (a filter keeps or
    drops it with its DUPLICATE_INPUT guard). Raises Unsupported, adding
    nothing, when a side cannot be read natively."""
    b_node, a_node = aliasing_parts.parse_part(code_part)
    added: list[tuple] = []  # reads to add once both sides are readable

    def resolve(text: str) -> tuple[int, tuple[str, int, Any]] | None:
        # An earlier part's read of the same text has the text's semantics by
        # construction; a read of the tree's only when its accessors do.
        vid = rec.aliasing_by_source.get(text)
        if vid is None:
            vid = rec.by_source.get(text)
        if vid is None or vid in rec.fresh_values or vid not in rec.reads:
            return None
        return vid, rec.reads[vid]

    def globals_value() -> int:
        vid = rec.globals_values.get(id(g_scope))
        if vid is None:
            raise aliasing_parts.Unsupported("G is not the globals dict Dynamo's tree reads")
        return vid

    def add_value(kind: str, parent: int, source: str, name: str, key: Any) -> int:
        # Placeholder ids (negative) until both sides are known readable.
        added.append((kind, parent, source, name, key))
        return -len(added)

    reader = aliasing_parts.SourceReader(resolve, add_value, globals_value, g_scope,
                                         dynamo_guards._get_closure_vars())
    b, a = reader.read(code_part, b_node), reader.read(code_part, a_node)
    real: dict[int, int] = {}

    def vid_of(v: int) -> int:
        return real[v] if v < 0 else v

    for i, (kind, parent, source, name, key) in enumerate(added):
        key_id = -1 if key is None else rec.object_id("key", key, True)
        vid = rec.ir.add_value(kind, vid_of(parent), source, name, -1, key_id)
        real[-(i + 1)] = vid
        rec.aliasing_by_source.setdefault(source, vid)
        rec.reads[vid] = (kind, vid_of(parent), key)
    file, line = _user_loc(getattr(guard, "user_stack", None))
    rec.ir.add_guard("object_aliasing", [vid_of(b), vid_of(a)], source=code_part,
                     origin=rec.origin_id(_state.origin), file=file, line=line,
                     verbose=verbose)


def _leaf_tuple_iterator_len(rec, mgr, length, type_id, parts, stack):
    vid, example = _node(rec, mgr)
    t = _obj_from_id(rec, vid, example, type_id, True)
    _add(rec, mgr, "tuple_iterator_len", "TUPLE_ITERATOR_LEN", parts, stack, dedup=True,
         object=rec.object_id("type", t, False), int=int(length))


def _leaf_fake_script_type_match(rec, mgr, fake_cls, type_id, parts, stack):
    # GuardBuilder.FAKE_SCRIPT_TYPE_MATCH passes id(type(real_obj)) for a
    # FakeScriptObject example, id(type(value)) otherwise.
    _vid, example = _node(rec, mgr)
    real = example.real_obj if isinstance(example, fake_cls) else example
    t = type(real)
    if id(t) != type_id:
        raise LookupError(f"cannot recover the type of id {type_id:#x}")
    _add(rec, mgr, "fake_script_type_match", "FAKE_SCRIPT_TYPE_MATCH", parts, stack,
         dedup=True, object=rec.object_id("type", t, False),
         aux=rec.object_id("type", fake_cls, False))


def _leaf_range_iterator_match(rec, mgr, start, stop, step, type_id, parts, stack):
    vid, example = _node(rec, mgr)
    t = _obj_from_id(rec, vid, example, type_id, True)
    _add(rec, mgr, "range_iterator_match", "RANGE_ITERATOR_MATCH", parts, stack, dedup=True,
         object=rec.object_id("type", t, False), ints=[int(start), int(stop), int(step)])


def _leaf_mapping_keys(rec, mgr, value, parts, stack):
    # MAPPING_KEYS_MATCH stores py::list(value.attr("keys")()) when built.
    keys = list(value.keys())
    _add(rec, mgr, "mapping_keys_match", "MAPPING_KEYS_MATCH", parts, stack, dedup=True,
         object=rec.object_id("constant", keys, True))


def _leaf_set_contains(rec, mgr, contains, item, parts, stack):
    _add(rec, mgr, "set_contains", "SET_CONTAINS", parts, stack,
         object=rec.object_id("key", item, True), int=1 if contains else 0)


def _applied_raw(rec, keys: Any) -> int:
    """LocalState.apply(keys).raw_repr() (_applied_keys) as int64 bits."""
    raw = _applied_keys(rec, keys)
    return raw - (1 << 64) if raw >= (1 << 63) else raw


def _leaf_dispatch_key_set(rec, mgr, value, parts, stack):
    # DISPATCH_KEY_SET_MATCH stores LocalState.apply(value).raw_repr() when
    # built and compares the applied raw repr of the value at check time.
    if not isinstance(value, torch._C.DispatchKeySet):
        raise TypeError("DISPATCH_KEY_SET_MATCH value is not a DispatchKeySet")
    _add(rec, mgr, "dispatch_key_set_match", "DISPATCH_KEY_SET_MATCH", parts, stack,
         dedup=True, object=rec.object_id("type", torch._C.DispatchKeySet, False),
         int=_applied_raw(rec, value))


def _leaf_dual_level(rec, mgr, level, parts, stack):
    import torch.autograd.forward_ad as forward_ad

    _add(rec, mgr, "dual_level_match", "DUAL_LEVEL_MATCH", parts, stack,
         object=rec.object_id("object", forward_ad, True), int=int(level))


def _tensor_property(rec: Recording, vid: int, kind: str, index: int, source: str) -> int:
    key = (vid, kind, index)
    pvid = rec.tensor_props.get(key)
    if pvid is None:
        pvid = rec.ir.add_value(kind, vid, source, "", index, -1)
        rec.tensor_props[key] = pvid
        rec.fresh_values.add(pvid)
    return pvid


def _record_shape_env(rec: Recording, mgr: Any, fn: Any, stack: Any, code_parts: list[str],
                      verbose_parts: list[str], scope: dict[str, Any],
                      torch_kind: str = "LAMBDA_GUARD") -> None:
    """Mirrors Dynamo's SHAPE_ENV guards (guards.py, GuardBuilder.SHAPE_ENV)
    as one shape_expr guard per translated code part, plus one epilogue lambda
    over the parts left in Python (see guardjit/shapes.py). `fn` is Dynamo's
    own lambda (None for the C++ guard); `torch_kind` the one tree guard the
    parts replace.

    The parts are translated when the recording is taken: Dynamo may build
    SHAPE_ENV before the guard whose manager reads a source the parts name
    (the NaN check `not math.isnan(L['self'].gate)` of a float attribute
    comes before the attribute's TYPE_MATCH), and the parts can only read
    values of the tree. Both run after every other guard, so the place of
    the guards in the IR does not matter."""
    rec.recorded_kinds[torch_kind] = rec.recorded_kinds.get(torch_kind, 0) + 1
    rec.pending_shapes.append((fn, stack, list(code_parts), list(verbose_parts), scope,
                               rec.origin_id(_state.origin)))


def _translate_shape_env(rec: Recording, fn: Any, stack: Any, code_parts: list[str],
                         verbose_parts: list[str], scope: dict[str, Any],
                         origin: int) -> None:
    def resolve(source: str):
        vid = rec.by_source.get(source)
        if vid is None:
            return None
        return vid, rec.examples.get(vid), rec.tensor_types.get(vid)

    tr = shapes.Translator(resolve, lambda v, k, i, s: _tensor_property(rec, v, k, i, s), scope)
    file, line = _user_loc(stack)
    python_parts: list[str] = []
    for i, code in enumerate(code_parts):
        verbose = str(verbose_parts[i]) if i < len(verbose_parts) else code
        try:
            expr, operands = tr.translate(code)
            fallback = shapes.python_guard([code], scope)
            rec.ir.add_guard("shape_expr", operands,
                             object=rec.object_id("callable", fallback, True),
                             origin=origin, file=file, line=line, verbose=verbose, expr=expr)
            rec.shape_parts_native += 1
        except Exception as e:  # Unsupported, or a ValueError from the IR
            python_parts.append(code)
            rec.shape_parts_python += 1
            rec.shape_python_reasons.append(f"{code}: {e}")
    if not python_parts:
        return
    # Dynamo's own function when nothing was translated; else the rest.
    rest = fn if fn is not None and len(python_parts) == len(code_parts) \
        else shapes.python_guard(python_parts, scope)
    file_parts = [p for p, c in zip(verbose_parts, code_parts) if c in python_parts]
    rec.ir.add_guard("epilogue_lambda", [], object=rec.object_id("callable", rest, True),
                     source="L", origin=origin, file=file, line=line,
                     verbose=_first(file_parts))


_LEAVES: dict[str, Any] = {
    "add_type_match_guard": _leaf_type_match,
    "add_id_match_guard": _leaf_id_match,
    "add_equals_match_guard": _leaf_equals_match,
    "add_none_match_guard": _simple("none_match", "NONE_MATCH", dedup=True),
    "add_true_match_guard": _simple("true_match", "TRUE_MATCH", dedup=True),
    "add_false_match_guard": _simple("false_match", "FALSE_MATCH", dedup=True),
    "add_not_none_guard": _simple("not_none", "NOT_NONE", dedup=True),
    # torch 2.14.1's LENGTH_CHECK reads a set's size itself (set.__len__),
    # 2.13.0's calls PySequence_Length: two IR kinds, the release's own.
    "add_length_check_guard": _leaf_length(
        "length_check_set_size" if _compat.at_least("2.14.1") else "length_check",
        "LENGTH_CHECK"),
    "add_dict_length_check_guard": _leaf_length("dict_length", "DICT_LENGTH"),
    "add_dict_contains_guard": _leaf_dict_contains,
    "add_no_hasattr_guard": _leaf_no_hasattr,
    "add_lambda_guard": _leaf_lambda,
    "add_global_state_guard": _leaf_global_state,
    "add_torch_function_mode_stack_guard": _leaf_torch_function_mode_stack,
    "add_default_device_guard": _leaf_default_device,
    "add_tensor_match_guard": _leaf_tensor_match,
    "add_dimension_marking_guard": _leaf_dimension_marking,
    "add_epilogue_lambda_guard": _leaf_epilogue_lambda,
    "add_float_is_nan_guard": _simple("float_is_nan", "FLOAT_IS_NAN"),
    "add_complex_is_nan_guard": _simple("complex_is_nan", "COMPLEX_IS_NAN"),
    "add_dict_version_guard": _leaf_dict_version,
    "add_tuple_iterator_length_guard": _leaf_tuple_iterator_len,
    "add_range_iterator_match_guard": _leaf_range_iterator_match,
    "add_mapping_keys_guard": _leaf_mapping_keys,
    "add_set_contains_guard": _leaf_set_contains,
    "add_dispatch_key_set_guard": _leaf_dispatch_key_set,
    "add_dual_level_match_guard": _leaf_dual_level,
    "add_fake_script_type_match_guard": _leaf_fake_script_type_match,
}


def _on_unknown(method: str, mgr: Any) -> None:
    rec = _recording_for(mgr)
    if rec is not None:
        rec.fail(f"{method} is not supported yet")


def _on_no_tensor_aliasing(managers: Any, names: Any, parts: Any, stack: Any) -> None:
    recs = {id(r): r for r in (_state.owner.get(id(m)) for m in managers) if r is not None}
    if len(recs) != 1:
        return
    rec = next(iter(recs.values()))
    if any(id(m) in rec.dead for m in managers):
        rec.fail("NO_TENSOR_ALIASING over a value below an empty DictGuardManager")
        return
    operands = [_node(rec, m)[0] for m in managers]
    file, line = _user_loc(stack)
    rec.ir.add_guard("no_tensor_aliasing", operands, source=", ".join(map(str, names)),
                     file=file, line=line, verbose=_first(parts))
    rec.recorded_kinds["NO_TENSOR_ALIASING"] = rec.recorded_kinds.get("NO_TENSOR_ALIASING", 0) + 1


def _on_object_aliasing(x: Any, y: Any, parts: Any, stack: Any) -> None:
    # install_object_aliasing_guard: one OBJECT_ALIASING leaf shared by the
    # two managers; it passes iff both values are the same object.
    rec = _state.owner.get(id(x))
    if rec is None or _state.owner.get(id(y)) is not rec:
        raise LookupError("object aliasing across recordings")
    _refuse_dead(rec, (x, y), "OBJECT_ALIASING")
    file, line = _user_loc(stack)
    rec.ir.add_guard("object_aliasing", [_node(rec, x)[0], _node(rec, y)[0]],
                     source=f"{x.get_source()} is {y.get_source()}",
                     origin=rec.origin_id(_state.origin), file=file, line=line,
                     verbose=_first(parts))
    rec.recorded_kinds["OBJECT_ALIASING"] = rec.recorded_kinds.get("OBJECT_ALIASING", 0) + 1


def _on_storage_overlapping(overlapping: Any, non_overlapping: Any, parts: Any,
                            stack: Any) -> None:
    # install_storage_overlapping_guard: one STORAGE_OVERLAPPING leaf per
    # non-empty list, sharing one checker; the IR keeps one guard whose first
    # `int` operands are the possibly-overlapping tensors.
    managers = list(overlapping) + list(non_overlapping)
    if not managers:
        return
    recs = {id(r): r for r in (_state.owner.get(id(m)) for m in managers)}
    if len(recs) != 1 or None in recs.values():
        raise LookupError("storage overlapping across recordings")
    rec = next(iter(recs.values()))
    _refuse_dead(rec, managers, "STORAGE_OVERLAPPING")
    file, line = _user_loc(stack)
    rec.ir.add_guard("storage_overlapping", [_node(rec, m)[0] for m in managers],
                     int=len(overlapping), source=", ".join(m.get_source() for m in managers),
                     origin=rec.origin_id(_state.origin), file=file, line=line,
                     verbose=_first(parts))
    n = int(bool(overlapping)) + int(bool(non_overlapping))
    rec.recorded_kinds["STORAGE_OVERLAPPING"] = \
        rec.recorded_kinds.get("STORAGE_OVERLAPPING", 0) + n


def _on_symbolic_shape(managers: Any, nr_int: Any, nr_float: Any, addr: Any, keepalive: Any,
                       verbose: Any, stack: Any) -> None:
    """install_symbolic_shape_guard (enable_cpp_symbolic_shape_guards): the
    compiled C function checks SHAPE_ENV's C++ code parts; SHAPE_ENV computed
    the equivalent Python code parts beside them (its `python_code_parts`),
    which are translated exactly as for the Python epilogue lambda."""
    recs = {id(r): r for r in (_state.owner.get(id(m)) for m in managers) if r is not None}
    if len(recs) != 1:
        raise LookupError("symbolic shape guard managers of no single recording")
    rec = next(iter(recs.values()))
    _refuse_dead(rec, managers, "SYMBOLIC_SHAPE_GUARD")
    frame = sys._getframe(2)  # SHAPE_ENV -> wrap_install's wrapper -> here
    if frame.f_code.co_name != "SHAPE_ENV":
        raise LookupError("install_symbolic_shape_guard called outside SHAPE_ENV")
    builder = frame.f_locals["self"]
    parts = list(frame.f_locals["python_code_parts"].exprs)
    vparts = list(frame.f_locals["verbose_code_parts"].exprs)
    scope = {"G": builder.scope["G"], **dynamo_guards.SYMPY_INTERP,
             **dynamo_guards._get_closure_vars()}
    _record_shape_env(rec, None, None, stack, parts, vparts, scope, "SYMBOLIC_SHAPE_GUARD")


def _on_unsupported_install(name: str, *managers_lists: Any) -> None:
    for group in managers_lists:
        items = group if isinstance(group, (list, tuple)) else [group]
        for m in items:
            rec = _state.owner.get(id(m))
            if rec is not None:
                rec.fail(f"{name} is not supported yet")


# --- installation ------------------------------------------------------------

def _wrap_method(cls: type, name: str, on_call: Any) -> None:
    orig = cls.__dict__[name]

    @functools.wraps(orig)
    def wrapper(self, *args, **kwargs):
        result = orig(self, *args, **kwargs)
        try:
            on_call(self, result, args, kwargs)
        except Exception as e:  # never break Dynamo: this unit stays on its path
            rec = _state.owner.get(id(self))
            if rec is not None:
                rec.fail(f"{name}: {type(e).__name__}: {e}")
        return result

    _originals.append((cls, name, orig))
    setattr(cls, name, wrapper)


def _accessor_hook(name: str):
    return lambda self, child, args, kwargs: _on_accessor(name, self, child, args, kwargs)


def _leaf_hook(name: str):
    fn = _LEAVES[name]

    def on_call(self, _result, args, kwargs):
        rec = _recording_for(self)
        if rec is not None:
            fn(rec, self, *args, *kwargs.values())
    return on_call


def _unknown_hook(name: str):
    return lambda self, _result, args, kwargs: _on_unknown(name, self)


_QUERY_METHODS = {
    "fail_count", "get_accessors", "get_child_managers", "get_leaf_guards", "get_source",
    "get_type_of_guarded_value", "has_no_accessors", "has_object_aliasing_guard",
    "is_guarded_value_immutable", "is_recursive_dict_tag_matching_disabled", "is_tag_safe",
    "is_tag_safe_root", "mark_tag_safe", "mark_tag_safe_root", "get_key_value_managers",
    "check", "check_verbose", "attach_compile_id", "clone_manager", "get_epilogue_lambda_guards",
}


def install() -> None:
    """Wraps Dynamo's guard-building methods (idempotent)."""
    global _installed
    if _installed:
        return
    for cls in (_GM, _DGM, _ROOT):
        for name in list(cls.__dict__):
            if name.startswith("_") or name in _QUERY_METHODS:
                continue
            if name in _ACCESSORS:
                _wrap_method(cls, name, _accessor_hook(name))
            elif name in _LEAVES:
                _wrap_method(cls, name, _leaf_hook(name))
            elif name.endswith("_manager") or name.startswith("add_"):
                _wrap_method(cls, name, _unknown_hook(name))

    def wrap_install(name: str, on_call: Any) -> None:
        orig = getattr(dynamo_guards, name)

        @functools.wraps(orig)
        def wrapper(*args, **kwargs):
            result = orig(*args, **kwargs)
            try:
                on_call(*args, **kwargs)
            except Exception:
                _on_unsupported_install(name, *args[:2])
            return result

        _originals.append((dynamo_guards, name, orig))
        setattr(dynamo_guards, name, wrapper)

    _mirror_mode_flag()
    _track_guard_origins()
    _wrap_shape_env_lambda()
    wrap_install("install_no_tensor_aliasing_guard", _on_no_tensor_aliasing)
    wrap_install("install_object_aliasing_guard", _on_object_aliasing)
    wrap_install("install_storage_overlapping_guard", _on_storage_overlapping)
    wrap_install("install_symbolic_shape_guard", _on_symbolic_shape)
    _installed = True


def _origin_fields(guard: Any, builder: Any) -> tuple:
    """add_origin arguments: the GuardFilterEntry torch builds for `guard`
    (torch/_dynamo/guards.py make_guard_filter_entry), plus the two source
    predicates the nn-module filters call on `entry.orig_guard.source`."""
    entry = dynamo_guards.make_guard_filter_entry(guard, builder)
    source = guard.source
    return (str(entry.guard_type), str(entry.name),
            [str(t) for t in entry.derived_guard_types], bool(entry.has_value),
            bool(entry.is_global),
            bool(entry.has_value and isinstance(entry.value, torch.nn.Parameter)),
            bool(source.is_unspecialized_nn_module()),
            bool(source.is_unspecialized_builtin_nn_module()))


def _track_guard_origins() -> None:
    """Wraps torch._guards.Guard.create, which GuardBuilder calls once per
    Dynamo guard, so each leaf guard recorded meanwhile knows its origin."""
    from torch._guards import Guard

    orig = Guard.create

    @functools.wraps(orig)
    def create(self, builder):
        outer, outer_creating = _state.origin, _state.creating
        settled = _state.settled.get(id(self))
        try:
            fields = settled[1] if settled is not None else _origin_fields(self, builder)
            _state.origin = (self, fields)
        except Exception:  # the entry cannot be built: filters cannot see it
            _state.origin = None
        _state.creating = _state.origin
        codes = getattr(builder, "object_aliasing_guard_codes", None)
        n_codes = len(codes) if codes is not None else 0
        try:
            return orig(self, builder)
        finally:
            _state.origin, _state.creating = outer, outer_creating
            if settled is None:
                _settle_origin(self, builder)
            if codes is not None and len(codes) > n_codes and id(self) in _state.settled:
                _state.aliasing.append((self, _state.settled[id(self)][1],
                                        list(codes[n_codes:]), builder.scope["G"]))

    _originals.append((Guard, "create", orig))
    Guard.create = create

    # Guards added while GuardBuilder walks a source's path to its manager
    # (the EQUALS_MATCH on a dict key under a DictGuardManager) belong to the
    # path, not to the Dynamo guard being built: the first guard to walk the
    # path adds them, later ones find the cached manager. They get no origin;
    # a guard filter keeps them iff it keeps a guard below the same dict entry.
    builder_cls = dynamo_guards.GuardBuilder
    orig_path = builder_cls.get_guard_manager_from_source

    @functools.wraps(orig_path)
    def get_guard_manager_from_source(self, source):
        outer = _state.origin
        _state.origin = None
        try:
            return orig_path(self, source)
        finally:
            _state.origin = outer

    _originals.append((builder_cls, "get_guard_manager_from_source", orig_path))
    builder_cls.get_guard_manager_from_source = get_guard_manager_from_source


def _settle_origin(guard: Any, builder: Any) -> None:
    """Records the filter entry of ``guard`` as it stands after its first
    create() (what torch's guard_filter_fn receives, CheckFunctionManager
    building every guard once before filtering) and updates the origin the
    recordings gave it."""
    try:
        fields = _origin_fields(guard, builder)
    except Exception:
        return
    _state.settled[id(guard)] = (guard, fields)
    for rec in _state.recordings.values():
        oid = rec.origins.get(id(guard))
        if oid is not None:
            rec.ir.set_origin(oid, *fields)


def _wrap_shape_env_lambda() -> None:
    """Notes the code parts of the SHAPE_ENV epilogue lambda: Dynamo passes
    them to GuardBuilder.add_python_lambda_leaf_guard_to_root, which builds
    the function and adds it with root.add_epilogue_lambda_guard (recorded
    by _leaf_epilogue_lambda, which consumes the note)."""
    builder = dynamo_guards.GuardBuilder
    orig = builder.add_python_lambda_leaf_guard_to_root

    @functools.wraps(orig)
    def wrapper(self, code_parts, verbose_code_parts, closure_vars=None, is_epilogue=True):
        caller = sys._getframe(1).f_code.co_name
        if caller == "SHAPE_ENV" and is_epilogue and closure_vars is not None:
            try:
                scope = {"G": self.scope["G"], **closure_vars}
                _state.shape = (list(code_parts), list(verbose_code_parts), scope)
            except Exception:
                _state.shape = None  # recorded as an opaque epilogue lambda
        try:
            return orig(self, code_parts, verbose_code_parts, closure_vars, is_epilogue)
        finally:
            _state.shape = None

    _originals.append((builder, "add_python_lambda_leaf_guard_to_root", orig))
    builder.add_python_lambda_leaf_guard_to_root = wrapper


def _mirror_mode_flag() -> None:
    """Mirrors torch's thread-local mode flag into _core (TENSOR_MATCH masks
    the Python dispatch keys by it). torch.utils._python_dispatch calls the
    setter through its module global, which is wrapped here."""
    from torch.utils import _python_dispatch as pd

    orig = pd.set_is_in_mode_without_ignore_compile_internals

    @functools.wraps(orig)
    def setter(in_mode):
        orig(in_mode)
        _core.set_in_mode_without_ignore_compile_internals(bool(in_mode))

    _originals.append((pd, "set_is_in_mode_without_ignore_compile_internals", orig))
    pd.set_is_in_mode_without_ignore_compile_internals = setter
    # This thread's current value (modes entered before guardjit was installed).
    _core.set_in_mode_without_ignore_compile_internals(
        bool(getattr(pd, "_is_in_any_mode_without_ignore_compile_internals", False)))


def uninstall() -> None:
    """Restores Dynamo's original methods."""
    global _installed
    while _originals:
        owner, name, orig = _originals.pop()
        setattr(owner, name, orig)
    reset()
    _installed = False


def count_tree_guards(root: Any) -> dict[str, int]:
    """Leaf guards per kind in Dynamo's finished tree (relational ones once).

    The recorder's result is trusted only if it has exactly these counts.
    """
    counts: dict[str, int] = {}
    seen: dict[int, Any] = {}

    def visit(mgr: Any) -> None:
        for guard in mgr.get_leaf_guards():
            kind = type(guard).__name__
            if isinstance(guard, C.RelationalGuard):
                if id(guard) in seen:
                    continue
                seen[id(guard)] = guard
            counts[kind] = counts.get(kind, 0) + 1
        if isinstance(mgr, _DGM):
            for _idx, (k, v) in sorted(mgr.get_key_value_managers().items()):
                if k is not None:
                    visit(k)
                if v is not None:
                    visit(v)
        for child in mgr.get_child_managers():
            visit(child)

    visit(root)
    for _guard in root.get_epilogue_lambda_guards():
        counts["LAMBDA_GUARD"] = counts.get("LAMBDA_GUARD", 0) + 1
    return counts


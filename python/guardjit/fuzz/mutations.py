"""Random, valid, undoable mutations of a compile unit's frame locals and of
the program state, addressed by Dynamo's own guard sources.

A :class:`Step` is data: an ``op`` name, the Dynamo ``source`` it applies to
(``L['self']._modules['fc'].weight``; ``""`` for global state) and a
JSON-able ``arg``. Applying a step needs nothing random, so a saved case
replays exactly. :func:`random_step` picks a source of the unit's Dynamo tree
(so most mutations hit something a guard reads), looks at the live value and
picks an op that fits its type.

Every change is recorded on an :class:`Undo` stack and undone in reverse
order after the case: frame-local changes go to a copy of the compile-time
frame locals; object, class, dict, global and grad-mode/autocast/... changes
are made in place and restored (dicts are restored to their exact key
order). What is mutated, by value type:

* tensor: dtype, a size, rank, 0-size, non-contiguous strides (transpose,
  as_strided), channels_last, a view or a fresh copy (same metadata),
  ``requires_grad`` flipped in place, a Tensor subclass, Parameter <-> Tensor,
  the meta device, an inference tensor, ``_dynamo_dynamic_indices`` set,
  aliasing with another tensor source, not a tensor;
* nn.Module: ``.to(dtype)`` in place, train/eval, a forward pre-hook,
  attributes added (also shadowing class attributes) and deleted;
* any object: ``__class__`` reassigned to a subclass, a class-level property
  that raises or returns another value, a class ``__getattr__`` that raises,
  a copy (new id), None, a dead weakref;
* constants: other values (also ``-0.0``, NaN, ``1`` vs ``1.0`` vs ``True``,
  big ints), int/float subclasses with the same value;
* dicts: keys added, removed, reordered, a copy of another type; lists and
  tuples: append, pop, list <-> tuple;
* functions: ``__defaults__``, ``__kwdefaults__``, closure cells rebound,
  another function;
* deletion of the value from its parent (attribute, dict key, frame local);
* global state: grad mode, inference mode, autocast, default dtype,
  deterministic algorithms, intra-op threads, a TorchFunctionMode, a
  TorchDispatchMode, torch-function disabled, saved-tensors hooks, a forward-AD
  dual level, the default device, a global module hook.
"""

from __future__ import annotations

import ast
import builtins
import copy
import dataclasses
import math
import random
import types
import weakref
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode


class Inapplicable(Exception):
    """The step does not fit the value it addresses (the case draws another)."""


@dataclasses.dataclass
class Step:
    op: str
    source: str = ""
    arg: Any = None

    def as_dict(self) -> dict:
        return {"op": self.op, "source": self.source, "arg": self.arg}

    @classmethod
    def from_dict(cls, d: dict) -> Step:
        return cls(d["op"], d.get("source", ""), d.get("arg"))

    def __str__(self) -> str:
        where = f" {self.source}" if self.source else ""
        return f"{self.op}{where}" + (f" {self.arg!r}" if self.arg is not None else "")


class Undo:
    """A stack of restore actions, run in reverse order. Each action is
    labelled with the step that pushed it (:meth:`label`), so an action that
    fails names its step.

    It also snapshots the process-wide torch state the ``g.*`` steps change
    (:func:`global_state`) when it is created, and when an action raised,
    :meth:`run` puts that state back (:func:`restore_global_state`): an
    action can fail half way because an earlier step of the same case is
    still in effect (``delete G[...].torch._C`` makes a dispatch mode's
    ``__exit__`` raise after it reset its flags and before it popped the
    mode, and the mode left on the stack makes Dynamo skip every later
    frame: no target compiles any more)."""

    def __init__(self) -> None:
        self._actions: list[tuple[str, Callable[[], None]]] = []
        self._label = ""
        self._state = global_state()

    def label(self, step: str) -> None:
        """The step the following actions undo."""
        self._label = step

    def push(self, fn: Callable[[], None]) -> None:
        self._actions.append((self._label, fn))

    def run(self) -> list[BaseException]:
        """Runs every action; the errors, each with ``undo_step`` (its label)."""
        errors = []
        while self._actions:
            label, fn = self._actions.pop()
            try:
                fn()
            except BaseException as e:  # noqa: BLE001 - keep undoing the rest
                e.undo_step = label  # type: ignore[attr-defined]
                errors.append(e)
        # Only after an action raised: a step that forgets its undo (no
        # error) is left for the leak check (base_ok, leaks.find_step) to find.
        repaired = restore_global_state(self._state) if errors else []
        if repaired:
            e = GlobalStateLeft("global state left changed, restored: " + ", ".join(repaired))
            e.undo_step = "global state"  # type: ignore[attr-defined]
            errors.append(e)
        return errors


class GlobalStateLeft(RuntimeError):
    """The undo actions left the process-wide torch state changed
    (:func:`restore_global_state` put it back)."""


def _dispatch_flags() -> tuple[bool, bool]:
    import torch.utils._python_dispatch as pd

    return (pd._is_in_non_infra_torch_dispatch_mode,
            pd._is_in_any_mode_without_ignore_compile_internals)


def global_state() -> dict[str, Any]:
    """The process-wide torch state the ``g.*`` steps change, read without
    going through a module attribute a step may have deleted."""
    C = _TORCH_C
    return {
        "grad": C.is_grad_enabled(),
        "inference_mode": _T["is_inference_mode_enabled"](),
        "dispatch_modes": C._len_torch_dispatch_stack(),
        "dispatch_flags": _dispatch_flags(),
        "function_modes": C._len_torch_function_stack(),
        "torch_function": C._get_torch_function_state(),
        "autocast_cpu": (C.is_autocast_enabled("cpu"), C.get_autocast_dtype("cpu")),
        "default_dtype": _T["get_default_dtype"](),
        "deterministic": (C._get_deterministic_algorithms(),
                          C._get_deterministic_algorithms_warn_only()),
        "num_threads": _T["get_num_threads"](),
        "module_hooks": tuple(torch.nn.modules.module._global_forward_pre_hooks),
    }


def restore_global_state(saved: dict[str, Any]) -> list[str]:
    """Puts back what differs from ``saved`` (:func:`global_state`); the
    names of what was put back. Modes pushed since are popped (their
    ``__exit__`` is not run again: it may have run half way)."""
    import torch.utils._python_dispatch as pd

    C = _TORCH_C
    now = global_state()
    out = [k for k in saved if now[k] != saved[k]]
    if not out:
        return out
    while C._len_torch_dispatch_stack() > saved["dispatch_modes"]:
        C._pop_torch_dispatch_stack(None)
    pd._is_in_non_infra_torch_dispatch_mode = saved["dispatch_flags"][0]
    pd._is_in_any_mode_without_ignore_compile_internals = saved["dispatch_flags"][1]
    _T["set_is_in_mode"](saved["dispatch_flags"][1])
    while C._len_torch_function_stack() > saved["function_modes"]:
        C._pop_torch_function_stack()
    C._set_torch_function_state(saved["torch_function"])
    C._set_grad_enabled(saved["grad"])
    C.set_autocast_enabled("cpu", saved["autocast_cpu"][0])
    C.set_autocast_dtype("cpu", saved["autocast_cpu"][1])
    _T["set_default_dtype"](saved["default_dtype"])
    C._set_deterministic_algorithms(saved["deterministic"][0],
                                    warn_only=saved["deterministic"][1])
    _T["set_num_threads"](saved["num_threads"])
    hooks = torch.nn.modules.module._global_forward_pre_hooks
    for k in [k for k in hooks if k not in saved["module_hooks"]]:
        del hooks[k]
    left = [k for k, v in global_state().items() if v != saved[k]]
    if left:  # inference mode has no setter: only its context manager leaves it
        raise GlobalStateLeft(f"could not restore the global torch state: {', '.join(left)}")
    return out


# --- helper types the mutations use (module level: replays see the same ones) ---

class FuzzTensor(torch.Tensor):
    """A Tensor subclass without __torch_function__ of its own."""


class FuzzInt(int):
    pass


class FuzzFloat(float):
    pass


class FuzzFunctionMode(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


class FuzzDispatchMode(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


class _Dead:
    pass


_SUBCLASSES: dict[type, type] = {}


def subclass_of(cls: type) -> type:
    """One fresh subclass per class (same layout: ``__class__`` may be set)."""
    sub = _SUBCLASSES.get(cls)
    if sub is None:
        sub = type(f"Fuzz{cls.__name__}", (cls,), {"__module__": __name__})
        _SUBCLASSES[cls] = sub
    return sub


def _raise(*_a: Any, **_k: Any) -> Any:
    raise RuntimeError("guardjit fuzz: this attribute raises")


_LITERALS = {"nan": math.nan, "inf": math.inf, "FuzzInt": FuzzInt, "FuzzFloat": FuzzFloat}


def literal(text: str) -> Any:
    return eval(text, {"__builtins__": {}}, dict(_LITERALS))  # noqa: S307 - our own reprs


DTYPES = ("float32", "float64", "float16", "bfloat16", "int64", "int32", "bool", "complex64")


# --- evaluating and assigning Dynamo sources ---------------------------------------

class Env:
    """Where a case's steps are applied: the chosen unit's frame locals (a
    copy) and the unit's globals scope (``G``, helper names)."""

    def __init__(self, f_locals: dict, scope: dict) -> None:
        from torch._dynamo.guards import _get_closure_vars

        self.f_locals = f_locals
        self.ns = {**_get_closure_vars(), **scope, "L": f_locals, "__builtins__": builtins}
        self._code: dict[str, Any] = {}

    def eval(self, source: str) -> Any:
        code = self._code.get(source)
        if code is None:
            code = self._code[source] = compile(source, "<source>", "eval")
        return eval(code, self.ns)  # noqa: S307 - Dynamo's own source expressions

    def parent(self, source: str) -> tuple[Any, str, Any, str]:
        """(parent object, "attr" | "item", name or key, parent source)."""
        node = ast.parse(source, mode="eval").body
        if isinstance(node, ast.Attribute):
            psrc = ast.unparse(node.value)
            return self.eval(psrc), "attr", node.attr, psrc
        if isinstance(node, ast.Subscript):
            try:
                key = ast.literal_eval(node.slice)
            except ValueError as e:
                raise Inapplicable(f"non-literal key in {source}") from e
            psrc = ast.unparse(node.value)
            return self.eval(psrc), "item", key, psrc
        raise Inapplicable(f"cannot assign to {source}")


# Taken at import: a step may wrap the builtins `str` and `int` in lambdas
# (o.wrap on G['__builtins_dict___N']['str']), and the restore that puts them
# back must not pass the wrappers to isinstance.
_NAMED_KEYS = (str, int)
# Taken at import too: a step may delete torch._C or torch.get_num_threads
# (through a global bound to the torch module) while global_state reads them.
_TORCH_C = torch._C
_T = {"is_inference_mode_enabled": torch.is_inference_mode_enabled,
      "get_default_dtype": torch.get_default_dtype, "set_default_dtype": torch.set_default_dtype,
      "get_num_threads": torch.get_num_threads, "set_num_threads": torch.set_num_threads,
      "set_is_in_mode": __import__("torch.utils._python_dispatch", fromlist=["x"])
      .set_is_in_mode_without_ignore_compile_internals}


def _restore_dict(d: dict, undo: Undo) -> Callable[[], None]:
    """Restores ``d`` to its items and key order now. Keys added meanwhile by
    someone else (Dynamo installs globals when the end-to-end sample
    recompiles) are kept. Returns ``mark``: called right after the step's own
    change, it records the keys that change added, which the restore drops.
    They are read back from the dict, not taken from the step: a dict subclass
    may store another key than the one set (transformers'
    ``_CanRecordRegistry.__setitem__`` stores ``str(key.__class__)``)."""
    snapshot = list(d.items())
    keys = {id(k) for k, _ in snapshot}
    ours: list[Any] = []  # the keys the step added (kept alive: compared by id)

    def restore() -> None:
        # Identity, not ==: values may be tensors.
        now = list(d.items())
        if len(now) == len(snapshot) and all(
                a[0] is b[0] and a[1] is b[1] for a, b in zip(now, snapshot)):
            return
        mine = {id(k) for k in ours}
        named = {k for k, _ in snapshot if isinstance(k, _NAMED_KEYS)}
        extra = [(k, v) for k, v in now if id(k) not in keys and id(k) not in mine
                 and not (isinstance(k, _NAMED_KEYS) and k in named)]
        d.clear()
        d.update(snapshot)
        d.update(extra)

    def mark() -> None:
        ours.extend(k for k in list(d) if id(k) not in keys)

    undo.push(restore)
    return mark


def _set_in_dict(d: dict, key: Any, value: Any, undo: Undo) -> None:
    mark = _restore_dict(d, undo)
    try:
        d[key] = value
    finally:
        mark()


def assign(env: Env, source: str, value: Any, undo: Undo) -> None:
    """Sets the value a source reads (its parent's attribute or item)."""
    parent, how, key, psrc = env.parent(source)
    if how == "item":
        if isinstance(parent, dict):
            _set_in_dict(parent, key, value, undo)
        elif isinstance(parent, list):
            old = parent[key]
            parent[key] = value
            undo.push(lambda: parent.__setitem__(key, old))
        elif isinstance(parent, tuple):
            assign(env, psrc, tuple(value if i == key else v for i, v in enumerate(parent)),
                   undo)
        else:
            raise Inapplicable(f"cannot set an item of {type(parent).__name__}")
        return
    d = getattr(parent, "__dict__", None)
    if isinstance(d, dict) and key in d and not isinstance(parent, type):
        _set_in_dict(d, key, value, undo)
        return
    if isinstance(parent, nn.Module):
        for sub in ("_parameters", "_buffers", "_modules"):
            if key in parent.__dict__.get(sub, {}):
                _set_in_dict(parent.__dict__[sub], key, value, undo)
                return
    missing = object()
    if not isinstance(parent, type):
        old = getattr(parent, key, missing)
    elif key in parent.__dict__:
        old = parent.__dict__[key]
    elif _data_descriptor(type(parent), key):
        # A slot of the type itself (__name__, __qualname__, __doc__ of a heap
        # type...): setting it changes the type, deleting it is refused.
        old = getattr(parent, key)
    else:
        old = missing  # inherited or absent: the set adds it to parent.__dict__
    try:
        object.__setattr__(parent, key, value) if not isinstance(parent, type) else \
            setattr(parent, key, value)
    except (AttributeError, TypeError) as e:
        raise Inapplicable(f"cannot set {source}: {e}") from e

    def restore() -> None:
        if old is missing:
            delattr(parent, key)
        else:
            object.__setattr__(parent, key, old) if not isinstance(parent, type) else \
                setattr(parent, key, old)
    undo.push(restore)


def _data_descriptor(cls: type, name: str) -> bool:
    """Whether ``name`` is a data descriptor (getset, member, property) of ``cls``."""
    for klass in cls.__mro__:
        if name in klass.__dict__:
            attr = klass.__dict__[name]
            return hasattr(type(attr), "__set__") or hasattr(type(attr), "__delete__")
    return False


def delete(env: Env, source: str, undo: Undo) -> None:
    parent, how, key, psrc = env.parent(source)
    if how == "item":
        if isinstance(parent, dict) and key in parent:
            _restore_dict(parent, undo)
            del parent[key]
            return
        if isinstance(parent, list) and -len(parent) <= key < len(parent):
            snapshot = list(parent)
            del parent[key]
            undo.push(lambda: parent.__setitem__(slice(None), snapshot))
            return
        if isinstance(parent, tuple):
            assign(env, psrc, tuple(v for i, v in enumerate(parent) if i != key), undo)
            return
        raise Inapplicable("nothing to delete")
    d = getattr(parent, "__dict__", None)
    if isinstance(parent, nn.Module):
        for sub in ("_parameters", "_buffers", "_modules"):
            sd = parent.__dict__.get(sub, {})
            if key in sd:
                _restore_dict(sd, undo)
                del sd[key]
                return
    if isinstance(d, dict) and key in d and not isinstance(parent, type):
        _restore_dict(d, undo)
        del d[key]
        return
    raise Inapplicable(f"cannot delete {source}")


# --- the ops -------------------------------------------------------------------

def _like(t: torch.Tensor, new: torch.Tensor) -> torch.Tensor:
    """``new`` with ``t``'s Python type and requires_grad where possible."""
    if new.is_floating_point() or new.is_complex():
        new.requires_grad_(t.requires_grad)
    if isinstance(t, nn.Parameter):
        return nn.Parameter(new, requires_grad=new.requires_grad)
    return new


def _tensor_replacement(t: torch.Tensor, op: str, arg: Any, env: Env) -> Any:
    with torch.no_grad():
        if op == "t.dtype":
            return _like(t, t.detach().to(getattr(torch, arg)))
        if op == "t.shape":
            dim, delta = arg
            if t.dim() == 0:
                raise Inapplicable("0-d")
            size = list(t.shape)
            dim %= t.dim()
            size[dim] = max(0, size[dim] + delta)
            return _like(t, torch.zeros(size, dtype=t.dtype))
        if op == "t.zero":
            if t.dim() == 0:
                raise Inapplicable("0-d")
            size = list(t.shape)
            size[arg % t.dim()] = 0
            return _like(t, torch.zeros(size, dtype=t.dtype))
        if op == "t.rank":
            new = t.detach().clone().unsqueeze(0) if arg > 0 else t.detach().reshape(-1).clone()
            return _like(t, new)
        if op == "t.transpose":
            if t.dim() < 2:
                raise Inapplicable("rank < 2")
            if arg == "same-shape":
                return _like(t, t.detach().transpose(0, -1).contiguous().transpose(0, -1))
            return _like(t, t.detach().transpose(0, -1))
        if op == "t.strided":
            if t.numel() == 0:
                raise Inapplicable("empty")
            strides, acc = [], 2
            for s in reversed(t.shape):
                strides.insert(0, acc)
                acc *= max(s, 1)
            base = torch.zeros(acc + 1, dtype=t.dtype)
            return _like(t, base.as_strided(t.shape, strides, arg))
        if op == "t.channels_last":
            if t.dim() != 4:
                raise Inapplicable("not 4-d")
            return _like(t, t.detach().clone().to(memory_format=torch.channels_last))
        if op == "t.view":
            return t.view(t.shape) if not isinstance(t, nn.Parameter) else \
                _like(t, t.detach().view(t.shape))
        if op == "t.fresh":
            return _like(t, t.detach().clone())
        if op == "t.subclass":
            return t.detach().clone().as_subclass(FuzzTensor)
        if op == "t.parameter":
            if isinstance(t, nn.Parameter):
                return t.detach().clone().requires_grad_(t.requires_grad)
            return nn.Parameter(t.detach().clone(), requires_grad=t.requires_grad
                                and (t.is_floating_point() or t.is_complex()))
        if op == "t.meta":
            return _like(t, t.detach().to("meta"))
        if op == "t.inference":
            with torch.inference_mode():
                return t.detach().clone()
        if op == "t.not_tensor":
            return {"list": lambda: t.tolist(), "none": lambda: None,
                    "float": lambda: 1.0}[arg]()
        if op == "t.alias":
            other = env.eval(arg)
            if not isinstance(other, torch.Tensor):
                raise Inapplicable("alias target is not a tensor")
            return other
    raise Inapplicable(op)


TENSOR_REPLACE = ("t.dtype", "t.shape", "t.zero", "t.rank", "t.transpose", "t.strided",
                  "t.channels_last", "t.view", "t.fresh", "t.subclass", "t.parameter", "t.meta",
                  "t.inference", "t.not_tensor", "t.alias")


def _apply_tensor_inplace(t: torch.Tensor, op: str, arg: Any, undo: Undo) -> None:
    if op == "t.requires_grad":
        if not t.is_leaf or not (t.is_floating_point() or t.is_complex()):
            raise Inapplicable("not a floating leaf")
        old = t.requires_grad
        t.requires_grad_(not old)
        undo.push(lambda: t.requires_grad_(old))
    elif op == "t.dynamic_indices":
        had = hasattr(t, "_dynamo_dynamic_indices")
        old = getattr(t, "_dynamo_dynamic_indices", None)
        t._dynamo_dynamic_indices = set(arg)

        def restore() -> None:
            if had:
                t._dynamo_dynamic_indices = old
            else:
                del t._dynamo_dynamic_indices
        undo.push(restore)
    else:
        raise Inapplicable(op)


def _module_op(m: nn.Module, op: str, arg: Any, undo: Undo) -> None:
    if op == "m.to":
        # .to() sets param.data but replaces buffers in _buffers: restore both.
        saved = [(p, p.data) for p in list(m.parameters()) + list(m.buffers())]
        if not saved:
            raise Inapplicable("no tensors")
        for sub in m.modules():
            _restore_dict(sub._parameters, undo)
            _restore_dict(sub._buffers, undo)
        m.to(getattr(torch, arg))

        def restore() -> None:
            for p, data in saved:
                p.data = data
        undo.push(restore)
    elif op == "m.train":
        flags = [(s, s.training) for s in m.modules()]
        m.train(not m.training)
        undo.push(lambda: [setattr(s, "training", f) for s, f in flags])
    elif op == "m.hook":
        h = m.register_forward_pre_hook(lambda mod, args: None)
        undo.push(h.remove)
    else:
        raise Inapplicable(op)


def _class_op(obj: Any, op: str, arg: Any, undo: Undo) -> None:
    cls = type(obj)
    if cls.__module__ == "builtins" or isinstance(obj, (type, types.ModuleType, torch.Tensor)):
        raise Inapplicable("builtin, type, module or tensor")
    if op == "o.class":
        try:
            obj.__class__ = subclass_of(cls)
        except TypeError as e:
            raise Inapplicable(str(e)) from e
        undo.push(lambda: setattr(obj, "__class__", cls))
        return
    if op == "o.class_property":
        name, mode = arg
        fget = _raise if mode == "raise" else (lambda self: 12345.5)
        attrs = ("__getattr__",) if op == "o.class_getattr" else (name,)
    elif op == "o.class_getattr":
        fget, attrs = None, ("__getattr__",)
    else:
        raise Inapplicable(op)
    attr = attrs[0]
    missing = object()
    old = cls.__dict__.get(attr, missing)
    try:
        setattr(cls, attr, property(fget) if fget is not None else _raise)
    except (TypeError, AttributeError) as e:
        raise Inapplicable(str(e)) from e

    def restore() -> None:
        if old is missing:
            delattr(cls, attr)
        else:
            setattr(cls, attr, old)
    undo.push(restore)


def _function_op(fn: Any, op: str, arg: Any, undo: Undo) -> None:
    if isinstance(fn, types.MethodType):
        fn = fn.__func__
    if not isinstance(fn, types.FunctionType):
        raise Inapplicable("not a Python function")
    if op == "f.defaults":
        old = fn.__defaults__
        fn.__defaults__ = None if arg is None else tuple(literal(a) for a in arg)
        undo.push(lambda: setattr(fn, "__defaults__", old))
    elif op == "f.kwdefaults":
        old = fn.__kwdefaults__
        fn.__kwdefaults__ = None if arg is None else {k: literal(v) for k, v in arg.items()}
        undo.push(lambda: setattr(fn, "__kwdefaults__", old))
    elif op == "f.closure":
        i, text = arg
        cells = fn.__closure__ or ()
        if i >= len(cells):
            raise Inapplicable("no such cell")
        cell = cells[i]
        old = cell.cell_contents
        cell.cell_contents = literal(text) if text != "<fn>" else (lambda *a, **k: a[0])
        undo.push(lambda: setattr(cell, "cell_contents", old))
    else:
        raise Inapplicable(op)


_STATE = {}


def _state(name: str) -> Callable:
    def register(fn: Callable) -> Callable:
        _STATE[name] = fn
        return fn
    return register


def _enter(ctx: Any, undo: Undo) -> None:
    ctx.__enter__()
    undo.push(lambda: ctx.__exit__(None, None, None))


@_state("g.grad")
def _grad(arg: Any, undo: Undo) -> None:
    _enter(torch.set_grad_enabled(not torch.is_grad_enabled()), undo)


@_state("g.inference_mode")
def _inference(arg: Any, undo: Undo) -> None:
    _enter(torch.inference_mode(), undo)


@_state("g.autocast")
def _autocast(arg: Any, undo: Undo) -> None:
    _enter(torch.autocast("cpu", dtype=getattr(torch, arg)), undo)


@_state("g.default_dtype")
def _default_dtype(arg: Any, undo: Undo) -> None:
    old = torch.get_default_dtype()
    torch.set_default_dtype(getattr(torch, arg))
    undo.push(lambda: torch.set_default_dtype(old))


@_state("g.deterministic")
def _deterministic(arg: Any, undo: Undo) -> None:
    old, old_warn = (torch.are_deterministic_algorithms_enabled(),
                     torch.is_deterministic_algorithms_warn_only_enabled())
    torch.use_deterministic_algorithms(not old, warn_only=bool(arg))
    undo.push(lambda: torch.use_deterministic_algorithms(old, warn_only=old_warn))


@_state("g.num_threads")
def _threads(arg: Any, undo: Undo) -> None:
    old = torch.get_num_threads()
    torch.set_num_threads(old + 1)
    undo.push(lambda: torch.set_num_threads(old))


@_state("g.torch_function_mode")
def _function_mode(arg: Any, undo: Undo) -> None:
    _enter(FuzzFunctionMode(), undo)


@_state("g.dispatch_mode")
def _dispatch_mode(arg: Any, undo: Undo) -> None:
    _enter(FuzzDispatchMode(), undo)


@_state("g.disable_torch_function")
def _disable_tf(arg: Any, undo: Undo) -> None:
    _enter(torch._C.DisableTorchFunctionSubclass() if arg == "subclass"
           else torch._C.DisableTorchFunction(), undo)


@_state("g.saved_tensors_hooks")
def _saved_hooks(arg: Any, undo: Undo) -> None:
    _enter(torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t), undo)


@_state("g.dual_level")
def _dual(arg: Any, undo: Undo) -> None:
    _enter(torch.autograd.forward_ad.dual_level(), undo)


@_state("g.default_device")
def _default_device(arg: Any, undo: Undo) -> None:
    _enter(torch.device(arg), undo)


@_state("g.module_hook")
def _global_hook(arg: Any, undo: Undo) -> None:
    h = torch.nn.modules.module.register_module_forward_pre_hook(lambda mod, args: None)
    undo.push(h.remove)


# --- applying a step ---------------------------------------------------------------

def apply(step: Step, env: Env, undo: Undo) -> None:
    """Applies one step (raises Inapplicable when it does not fit)."""
    op = step.op
    if op in _STATE:
        _STATE[op](step.arg, undo)
        return
    try:
        value = env.eval(step.source)
    except Exception as e:  # noqa: BLE001 - an earlier step removed it
        raise Inapplicable(f"{step.source} does not evaluate: {e!r}") from e
    if op == "delete":
        delete(env, step.source, undo)
    elif op in TENSOR_REPLACE:
        if not isinstance(value, torch.Tensor):
            raise Inapplicable("not a tensor")
        assign(env, step.source, _tensor_replacement(value, op, step.arg, env), undo)
    elif op in ("t.requires_grad", "t.dynamic_indices"):
        if not isinstance(value, torch.Tensor):
            raise Inapplicable("not a tensor")
        _apply_tensor_inplace(value, op, step.arg, undo)
    elif op.startswith("m."):
        if not isinstance(value, nn.Module):
            raise Inapplicable("not a module")
        _module_op(value, op, step.arg, undo)
    elif op in ("o.class", "o.class_property", "o.class_getattr"):
        _class_op(value, op, step.arg, undo)
    elif op.startswith("f."):
        _function_op(value, op, step.arg, undo)
    elif op == "set":
        assign(env, step.source, literal(step.arg), undo)
    elif op == "o.copy":
        if isinstance(value, (type, types.ModuleType, types.FunctionType)):
            raise Inapplicable("type, module or function")
        assign(env, step.source, copy.copy(value), undo)
    elif op == "o.wrap":
        if not callable(value):
            raise Inapplicable("not callable")
        assign(env, step.source, lambda *a, _f=value, **k: _f(*a, **k), undo)
    elif op == "o.dead_weakref":
        if not isinstance(value, weakref.ref):
            raise Inapplicable("not a weakref")
        assign(env, step.source, weakref.ref(_Dead()), undo)
    elif op == "o.add_attr":
        name, text = step.arg
        d = getattr(value, "__dict__", None)
        if not isinstance(d, dict) or isinstance(value, (type, types.ModuleType)):
            raise Inapplicable("no instance dict")
        _set_in_dict(d, name, literal(text), undo)
    elif op.startswith("d."):
        _dict_op(value, step, env, undo)
    elif op.startswith("s."):
        _seq_op(value, step, env, undo)
    else:
        raise Inapplicable(f"unknown op {op}")


def _dict_op(d: Any, step: Step, env: Env, undo: Undo) -> None:
    if not isinstance(d, dict):
        raise Inapplicable("not a dict")
    if step.op == "d.add":
        if literal(step.arg[0]) in d:
            raise Inapplicable("key exists")
        _set_in_dict(d, literal(step.arg[0]), literal(step.arg[1]), undo)
    elif step.op == "d.del":
        key = literal(step.arg)
        if key not in d:
            raise Inapplicable("no such key")
        _restore_dict(d, undo)
        del d[key]
    elif step.op == "d.reorder":
        if len(d) < 2:
            raise Inapplicable("fewer than 2 keys")
        mark = _restore_dict(d, undo)
        first = next(iter(d))
        try:
            d[first] = d.pop(first)
        finally:
            mark()
    elif step.op == "d.retype":
        new = dict(d) if type(d) is not dict else OrderedDict(d)
        assign(env, step.source, new, undo)
    else:
        raise Inapplicable(step.op)


def _seq_op(s: Any, step: Step, env: Env, undo: Undo) -> None:
    if not isinstance(s, (list, tuple)) or isinstance(s, torch.Size):
        raise Inapplicable("not a list or tuple")
    if step.op == "s.append":
        new = list(s) + [s[-1] if s else 1.0]
    elif step.op == "s.pop":
        if not s:
            raise Inapplicable("empty")
        new = list(s)[:-1]
    elif step.op == "s.retype":
        new = tuple(s) if isinstance(s, list) else list(s)
        assign(env, step.source, new, undo)
        return
    else:
        raise Inapplicable(step.op)
    if isinstance(s, list):
        snapshot = list(s)
        s[:] = new
        undo.push(lambda: s.__setitem__(slice(None), snapshot))
    else:
        assign(env, step.source, type(s)(new) if type(s) is tuple else tuple(new), undo)


# --- drawing random steps --------------------------------------------------------------

def _other_values(v: Any, rng: random.Random) -> list[str]:
    """Literal texts of values unlike ``v`` (and a few equal ones)."""
    if isinstance(v, bool):
        return [repr(not v), repr(int(v)), "None"]
    if isinstance(v, int):
        return [repr(v + 1), repr(-v - 1), repr(float(v)), repr(2 ** 70), f"FuzzInt({v})",
                repr(v), "True" if v == 1 else "None"]
    if isinstance(v, float):
        out = [repr(v * 2 + 1), repr(-v), "nan", "inf", f"FuzzFloat({v!r})", repr(v),
               "None"]
        if v == 0.0:
            out.append("-0.0" if math.copysign(1, v) > 0 else "0.0")
        if v == int(v) and abs(v) < 1e15:
            out.append(repr(int(v)))
        return out
    if isinstance(v, str):
        return [repr(v + "_"), repr(""), repr(v.upper()), "None"]
    if v is None:
        return ["0", "False", "1.0", "''"]
    if isinstance(v, complex):
        return [repr(v + 1), "None"]
    return ["None", "1"]


_STATE_ARGS: dict[str, Callable[[random.Random], Any]] = {
    "g.grad": lambda r: None, "g.inference_mode": lambda r: None,
    "g.autocast": lambda r: r.choice(("bfloat16", "float16")),
    "g.default_dtype": lambda r: r.choice(("float64", "float16")),
    "g.deterministic": lambda r: r.random() < 0.5, "g.num_threads": lambda r: None,
    "g.torch_function_mode": lambda r: None, "g.dispatch_mode": lambda r: None,
    "g.disable_torch_function": lambda r: r.choice(("all", "subclass")),
    "g.saved_tensors_hooks": lambda r: None, "g.dual_level": lambda r: None,
    "g.default_device": lambda r: "meta", "g.module_hook": lambda r: None,
}


def random_state_step(rng: random.Random) -> Step:
    op = rng.choice(sorted(_STATE_ARGS))
    return Step(op, "", _STATE_ARGS[op](rng))


def random_value_step(rng: random.Random, source: str, value: Any,
                      tensor_sources: list[str]) -> Step | None:
    """A step fitting ``value`` (the live value of ``source``), or None."""
    ops: list[tuple[str, Any]] = []
    if "__builtins" in source:
        # The real builtins dict: deleting `len` would break Python itself.
        # A wrapper with the same behaviour is a new object (ID_MATCH fails).
        return Step("o.wrap", source) if "[" in source.split("__builtins")[-1] else None
    deletable = source not in ("L", "G") and ("[" in source or "." in source)
    if isinstance(value, torch.Tensor):
        cur = str(value.dtype).replace("torch.", "")
        ops += [("t.dtype", rng.choice([d for d in DTYPES if d != cur])),
                ("t.shape", [rng.randrange(max(value.dim(), 1)), rng.choice((1, -1, 2))]),
                ("t.zero", rng.randrange(max(value.dim(), 1))),
                ("t.rank", rng.choice((1, -1))),
                ("t.transpose", rng.choice(("same-shape", "swap"))),
                ("t.strided", rng.choice((0, 1))), ("t.channels_last", None),
                ("t.view", None), ("t.fresh", None), ("t.subclass", None),
                ("t.parameter", None), ("t.meta", None), ("t.inference", None),
                ("t.not_tensor", rng.choice(("list", "none", "float"))),
                ("t.requires_grad", None), ("t.requires_grad", None),
                ("t.dynamic_indices", [0])]
        others = [s for s in tensor_sources if s != source]
        if others:
            ops += [("t.alias", rng.choice(others))] * 2
    elif isinstance(value, nn.Module):
        ops += [("m.to", rng.choice(("float64", "float16"))), ("m.train", None),
                ("m.hook", None), ("o.class", None), ("o.copy", None),
                ("o.add_attr", [rng.choice(("fuzz_attr", "forward", "training", "_fuzz")),
                                rng.choice(("1.0", "None", "True"))])]
        attrs = [k for k in vars(value) if not k.startswith("__")]
        if attrs:
            ops.append(("o.class_property", [rng.choice(attrs),
                                             rng.choice(("raise", "value"))]))
        ops.append(("o.class_getattr", None))
    elif isinstance(value, dict):
        keys = list(value)
        ops += [("d.add", [repr(rng.choice(("fuzz_key", "b", "a", 7))), "1.0"]),
                ("d.reorder", None), ("d.retype", None)]
        if keys and all(isinstance(k, (str, int)) for k in keys):
            ops.append(("d.del", repr(rng.choice(keys))))
    elif isinstance(value, (list, tuple)) and not isinstance(value, torch.Size):
        ops += [("s.append", None), ("s.pop", None), ("s.retype", None)]
    elif isinstance(value, (types.FunctionType, types.MethodType)):
        fn = value.__func__ if isinstance(value, types.MethodType) else value
        if fn.__defaults__:
            new = [rng.choice(_other_values(d, rng)) if rng.random() < 0.7 else repr(d)
                   if _repr_roundtrips(d) else "None" for d in fn.__defaults__]
            ops += [("f.defaults", new), ("f.defaults", None)]
        if fn.__kwdefaults__:
            ops.append(("f.kwdefaults", None))
        if fn.__closure__:
            i = rng.randrange(len(fn.__closure__))
            try:
                cur = fn.__closure__[i].cell_contents
            except ValueError:
                cur = None
            text = ("<fn>" if callable(cur) else rng.choice(_other_values(cur, rng)))
            ops += [("f.closure", [i, text])] * 2
    elif isinstance(value, weakref.ref):
        ops += [("o.dead_weakref", None)] * 2
    elif isinstance(value, (bool, int, float, str, complex)) or value is None:
        ops += [("set", rng.choice(_other_values(value, rng))) for _ in range(4)]
    elif not isinstance(value, (type, types.ModuleType)) and hasattr(value, "__dict__"):
        attrs = [k for k in vars(value) if not k.startswith("__")]
        ops += [("o.class", None), ("o.copy", None), ("o.class_getattr", None),
                ("o.add_attr", [rng.choice(("fuzz_attr",) + tuple(attrs[:3])), "None"])]
        if attrs:
            ops += [("o.class_property", [rng.choice(attrs), rng.choice(("raise", "value"))])] * 2
    if deletable:
        ops.append(("delete", None))
    if source not in ("L", "G") and not isinstance(value, (types.ModuleType, type)):
        ops.append(("set", "None"))
    if not ops:
        return None
    op, arg = rng.choice(ops)
    return Step(op, source, arg)


def _repr_roundtrips(v: Any) -> bool:
    try:
        return literal(repr(v)) == v or (isinstance(v, float) and math.isnan(v))
    except Exception:  # noqa: BLE001
        return False


@dataclasses.dataclass
class Case:
    """One fuzz case: which unit of the target (its frame locals get the
    frame-local changes) and the steps, applied in order."""

    unit: int
    steps: list[Step]

    def as_dict(self) -> dict:
        return {"unit": self.unit, "steps": [s.as_dict() for s in self.steps]}

    @classmethod
    def from_dict(cls, d: dict) -> Case:
        return cls(d["unit"], [Step.from_dict(s) for s in d["steps"]])


def random_case(rng: random.Random, units: list) -> Case:
    """1-3 steps (most hit a source of the unit's Dynamo tree, a fifth set
    global state) for a random unit of ``units`` (targets.CheckUnit)."""
    ui = rng.randrange(len(units))
    u = units[ui]
    env = Env(dict(u.f_locals), u.scope)
    steps: list[Step] = []
    for _ in range(rng.choice((1, 1, 1, 2, 2, 3))):
        if rng.random() < 0.2 or not u.sources:
            steps.append(random_state_step(rng))
            continue
        for _ in range(6):
            src = rng.choice(u.sources)
            try:
                value = env.eval(src)
            except Exception:  # noqa: BLE001 - needs more than L and G
                continue
            step = random_value_step(rng, src, value, u.tensor_sources)
            if step is not None:
                steps.append(step)
                break
    return Case(ui, steps)

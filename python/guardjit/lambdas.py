"""Recognizers of the Python lambdas torch's Dynamo (2.13, 2.14) generates.

Dynamo installs some guards as Python callables (``add_lambda_guard``). A
recognizer proves that a callable is one of torch's own templates, with the
parameters it closed over, so the recorder can record an IR guard with the
same meaning instead of an opaque ``lambda`` guard that calls Python on
every check. Anything not proven stays a Python lambda (counted in
``guardjit.stats()['guards_python']``).

The proofs are structural, against the installed torch: the function's
code object is the very nested code object of torch's method, its closure
cells hold torch's own helpers (identity), and those helpers' code reads
exactly the names and constants of the source of the release that has them
(2.13 and 2.14 for the saved-tensors hooks; 2.14 only for COW_TENSOR_MATCH
and ContextVar.get, which never match on 2.13). A monkeypatched helper fails
the proof.
"""

from __future__ import annotations

import builtins
import dataclasses
from typing import Any

import torch
import torch._dynamo.guards as dynamo_guards

__all__ = ["ContextVarGet", "CowTensorMatch", "SavedTensorsHooks", "contextvar_get",
           "cow_tensor_match", "saved_tensors_hooks"]


def _nested_code(method: Any, name: str) -> Any:
    for const in method.__code__.co_consts:
        if getattr(const, "co_name", None) == name:
            return const
    return None


def _torch_method(name: str) -> Any:
    """GuardBuilder's own method ``name`` as torch/_dynamo/guards.py defines
    it, through any functools.wraps wrappers (the recorder wraps
    get_guard_manager_from_source), or None."""
    fn = getattr(dynamo_guards.GuardBuilder, name, None)
    for _ in range(8):
        code = getattr(fn, "__code__", None)
        if code is not None and code.co_filename == dynamo_guards.__file__ \
                and code.co_name == name:
            return fn
        fn = getattr(fn, "__wrapped__", None)
    return None


def _closure(fn: Any) -> dict[str, Any] | None:
    code, cells = fn.__code__, fn.__closure__ or ()
    if len(code.co_freevars) != len(cells):
        return None
    try:
        return {name: cell.cell_contents for name, cell in zip(code.co_freevars, cells)}
    except ValueError:  # an empty cell
        return None


def _builtins_unshadowed(module_globals: dict, names: tuple[str, ...]) -> bool:
    """Each name resolves to the builtin in a function of that module."""
    return all(n not in module_globals and getattr(builtins, n) is _BUILTINS[n] for n in names)


_BUILTINS = {"tuple": tuple, "map": map, "id": id, "isinstance": isinstance, "bool": bool}


@dataclasses.dataclass
class SavedTensorsHooks:
    """GuardBuilder.AUTOGRAD_SAVED_TENSORS_HOOKS's lambda, proven."""

    ids: tuple[int, int] | None  # guard_hooks_ids: (id(pack), id(unpack)) or None
    graph_module: type  # torch.fx.GraphModule, which the inlineable test reads


def saved_tensors_hooks(fn: Any) -> SavedTensorsHooks | None:
    """The parameters of ``fn`` if it is the AUTOGRAD_SAVED_TENSORS_HOOKS lambda
    of torch 2.13 (torch/_dynamo/guards.py), else None::

        def fn(x): return guard_hooks_ids == hooks_ids_fn(get_hooks())
        def hooks_ids_fn(hooks):
            if not are_inline_hooks(hooks): return None
            return tuple(map(id, hooks))
        get_hooks = torch._functorch._aot_autograd.utils.top_saved_tensors_hooks
            # = torch._C._autograd._top_saved_tensors_default_hooks(True)
        are_inline_hooks = ...utils.saved_tensors_hooks_are_inlineable
            # = bool(h) and isinstance(pack, torch.fx.GraphModule)
            #           and isinstance(unpack, torch.fx.GraphModule)
    """
    from torch._functorch._aot_autograd import utils

    method = dynamo_guards.GuardBuilder.AUTOGRAD_SAVED_TENSORS_HOOKS
    if getattr(fn, "__code__", None) is not _nested_code(method, "fn"):
        return None
    cells = _closure(fn)
    if cells is None or set(cells) != {"get_hooks", "guard_hooks_ids", "hooks_ids_fn"}:
        return None
    get_hooks, ids, hooks_ids_fn = cells["get_hooks"], cells["guard_hooks_ids"], \
        cells["hooks_ids_fn"]
    if getattr(hooks_ids_fn, "__code__", None) is not _nested_code(method, "hooks_ids_fn"):
        return None
    if not _builtins_unshadowed(dynamo_guards.__dict__, ("tuple", "map", "id")):
        return None
    inner = _closure(hooks_ids_fn)
    if inner is None or set(inner) != {"are_inline_hooks"}:
        return None
    are_inline = inner["are_inline_hooks"]
    if get_hooks is not utils.top_saved_tensors_hooks \
            or are_inline is not utils.saved_tensors_hooks_are_inlineable:
        return None
    for f, names, consts in (
            (get_hooks, ("torch", "_C", "_autograd", "_top_saved_tensors_default_hooks"),
             (None, True)),
            (are_inline, ("isinstance", "torch", "fx", "GraphModule"), (None, False))):
        code = f.__code__
        if code.co_filename != utils.__file__ or code.co_names != names \
                or code.co_consts != consts or f.__globals__ is not utils.__dict__:
            return None
    if utils.__dict__.get("torch") is not torch or not _builtins_unshadowed(
            utils.__dict__, ("isinstance",)):
        return None
    if type(torch._C._autograd._top_saved_tensors_default_hooks).__name__ \
            != "builtin_function_or_method":
        return None
    if ids is not None and not (type(ids) is tuple and len(ids) == 2
                                and all(type(i) is int for i in ids)):
        return None
    return SavedTensorsHooks(ids, torch.fx.GraphModule)


@dataclasses.dataclass
class CowTensorMatch:
    """GuardBuilder.COW_TENSOR_MATCH's lambda (torch 2.14), proven."""

    expected: bool  # the copy-on-write answer at compile time


# The 2.14 source of the two module functions the lambda calls
# (torch/_dynamo/guards.py), as names and constants of their code.
_COW_HELPERS = (
    ("_cow_tensor_matches",
     ("isinstance", "bool", "_try_is_cow_tensor", "_COW_TENSOR_UNSUPPORTED"), (None, False)),
    ("_try_is_cow_tensor",
     ("isinstance", "torch", "Tensor", "_COW_TENSOR_UNSUPPORTED", "_C", "_dispatch_keys", "has",
      "DispatchKey", "Python", "_is_cow_tensor"), (None,)),
)


def cow_tensor_match(fn: Any) -> CowTensorMatch | None:
    """The expected answer if ``fn`` is the COW_TENSOR_MATCH lambda of torch
    2.14 (torch/_dynamo/guards.py), else None (always on torch 2.13, which
    has no such guard)::

        def guard_fn(x): return _cow_tensor_matches(x, expected)
        def _cow_tensor_matches(value, expected):
            if not isinstance(expected, bool): return False
            actual = _try_is_cow_tensor(value)
            return actual is not _COW_TENSOR_UNSUPPORTED and actual == expected
        def _try_is_cow_tensor(value):
            if not isinstance(value, torch.Tensor): return _COW_TENSOR_UNSUPPORTED
            if torch._C._dispatch_keys(value).has(torch._C.DispatchKey.Python):
                return _COW_TENSOR_UNSUPPORTED
            return torch._C._is_cow_tensor(value)

    The two helpers are module functions read from the guards module's
    globals when the lambda runs: both must be torch's own (same file, same
    names and constants), as must the ``torch`` they read.
    """
    method = _torch_method("COW_TENSOR_MATCH")
    if method is None:
        return None
    if getattr(fn, "__code__", None) is not _nested_code(method, "guard_fn"):
        return None
    cells = _closure(fn)
    if cells is None or set(cells) != {"expected"} or type(cells["expected"]) is not bool:
        return None
    g = dynamo_guards.__dict__
    if fn.__globals__ is not g or "_COW_TENSOR_UNSUPPORTED" not in g:
        return None
    for name, names, consts in _COW_HELPERS:
        f = g.get(name)
        code = getattr(f, "__code__", None)
        if code is None or code.co_filename != dynamo_guards.__file__ \
                or code.co_names != names or code.co_consts != consts \
                or f.__globals__ is not g or f.__closure__ is not None:
            return None
    if g.get("torch") is not torch or not _builtins_unshadowed(g, ("isinstance", "bool")):
        return None
    for name in ("_dispatch_keys", "_is_cow_tensor"):
        if type(getattr(torch._C, name, None)).__name__ != "builtin_function_or_method":
            return None
    return CowTensorMatch(cells["expected"])


@dataclasses.dataclass
class ContextVarGet:
    """The accessor lambda of torch 2.14's ContextVarGetSource, proven."""

    has_default: bool  # x.get(d) rather than x.get()
    default: Any  # d (None when has_default is False)


def _contextvar_get_code(with_default: bool) -> Any:
    """The nested code object of ``lambda x, d=default_val: x.get(d)`` (or
    ``lambda x: x.get()``) in GuardBuilder.get_guard_manager_from_source,
    or None (torch 2.13 has neither)."""
    method = _torch_method("get_guard_manager_from_source")
    if method is None:
        return None
    want = ("x", "d") if with_default else ("x",)
    found = [c for c in method.__code__.co_consts
             if getattr(c, "co_name", None) == "<lambda>" and c.co_names == ("get",)
             and c.co_varnames == want and c.co_argcount == len(want)]
    return found[0] if len(found) == 1 else None


def contextvar_get(fn: Any) -> ContextVarGet | None:
    """What ``fn`` reads if it is the ``python_lambda`` torch 2.14's
    get_guard_manager_from_source gives ``lambda_manager`` for a
    ContextVarGetSource, else None::

        lambda x, d=default_val: x.get(d)      # has_default
        lambda x: x.get()

    Its code object must be torch's nested one (no globals, no closure: only
    the attribute ``get``), and ``d`` the one default it captured."""
    code = getattr(fn, "__code__", None)
    if code is None or getattr(fn, "__closure__", None) is not None \
            or getattr(fn, "__kwdefaults__", None) is not None:
        return None
    if code is _contextvar_get_code(True):
        defaults = fn.__defaults__
        if type(defaults) is not tuple or len(defaults) != 1:
            return None
        return ContextVarGet(True, defaults[0])
    if code is _contextvar_get_code(False) and fn.__defaults__ is None:
        return ContextVarGet(False, None)
    return None

"""Recognizers of the Python lambdas torch 2.13's Dynamo generates.

Dynamo installs some guards as Python callables (``add_lambda_guard``). A
recognizer proves that a callable is one of torch's own templates, with the
parameters it closed over, so the recorder can record an IR guard with the
same meaning instead of an opaque ``lambda`` guard that calls Python on
every check. Anything not proven stays a Python lambda (counted in
``guardjit.stats()['guards_python']``).

The proofs are structural, against the installed torch 2.13: the function's
code object is the very nested code object of torch's method, its closure
cells hold torch's own helpers (identity), and those helpers' code reads
exactly the names and constants of the 2.13 source. A monkeypatched helper
fails the proof.
"""

from __future__ import annotations

import builtins
import dataclasses
from typing import Any

import torch
import torch._dynamo.guards as dynamo_guards

__all__ = ["SavedTensorsHooks", "saved_tensors_hooks"]


def _nested_code(method: Any, name: str) -> Any:
    for const in method.__code__.co_consts:
        if getattr(const, "co_name", None) == name:
            return const
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


_BUILTINS = {"tuple": tuple, "map": map, "id": id, "isinstance": isinstance}


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

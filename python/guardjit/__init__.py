"""guardjit: torch.compile guard sets compiled to native code with LLVM ORC.

Entry points:

* :func:`compile` - ``torch.compile`` with the same arguments; the compile
  units of that model run guardjit's check in Dynamo's cache lookup.
* :func:`install` - route every ``torch.compile`` through guardjit (also done
  at start-up when the environment variable ``GUARDJIT=1`` is set).
* :func:`stats` - how many compile units and guards run natively, and why the
  others stay on Dynamo's path.

On a torch, Python or object layout guardjit has not verified, it warns once
and leaves torch's own guards in place.
"""

from __future__ import annotations

import functools
from typing import Any

import torch  # noqa: F401  (must be loaded before guardjit._core)

from guardjit import _compat

__version__ = "0.1.0"
__all__ = ["compile", "install", "uninstall", "stats", "enabled"]


def enabled() -> bool:
    """True when guardjit can run in this process (warns once otherwise)."""
    return _compat.verified()


def install() -> bool:
    """Routes every torch.compile compile unit through guardjit.

    Returns False (after one warning) when guardjit cannot run here; torch's
    own guards are then left in place.
    """
    if not enabled():
        return False
    from guardjit import plugin

    plugin.install_hooks()
    plugin.config.route_all = True
    return True


def uninstall() -> None:
    """Stops converting new compile units (existing ones keep their check)."""
    if not _compat.problems():
        from guardjit import plugin

        plugin.config.route_all = False
        plugin.uninstall_hooks()


def compile(model: Any = None, **kwargs: Any) -> Any:
    """``torch.compile(model, **kwargs)`` whose guards guardjit checks.

    Takes exactly torch.compile's arguments and returns what it returns: for
    a module torch's ``OptimizedModule`` (same class, ``_orig_mod``,
    ``state_dict``; it pickles, saves with ``torch.save`` and deep-copies,
    and the copy is still guardjit's), for a function a wrapper of torch's.
    Like torch.compile it pops ``guard_filter_fn`` from the ``options`` dict
    it is given: pass each compile its own dict.
    Compile units created while the returned callable runs (the model's
    frames, including graph-break continuations) are converted; every other
    torch.compile is untouched unless :func:`install` was called.
    """
    if model is None:
        return functools.partial(compile, **kwargs)
    compiled = torch.compile(model, **kwargs)
    if compiled is model or not enabled():  # e.g. disable=True: model itself
        return compiled
    from guardjit import _compiled, plugin

    plugin.install_hooks()
    if isinstance(compiled, torch.nn.Module):
        # Still torch's OptimizedModule (pickles, saves, deep-copies and nests
        # as torch's does); its dynamo_ctx marks the calls (_compiled.py).
        return _compiled.mark_module(compiled)
    return _compiled.mark(compiled)


def __getattr__(name: str) -> Any:
    # Resolved on first use (pickle looks classes up by name): importing
    # them imports torch._dynamo, which `import guardjit` must not do.
    if name == "GuardJitOptimizeContext":
        from guardjit._compiled import GuardJitOptimizeContext

        return GuardJitOptimizeContext
    raise AttributeError(f"module 'guardjit' has no attribute {name!r}")


def stats() -> dict[str, Any]:
    """Process-wide statistics over every compile unit guardjit has seen.

    Keys: ``torch`` (the running torch's ``__version__``, which guardjit's
    ``_core`` was built against); ``tensor_match_inline`` ("verified" when
    native code reads TENSOR_MATCH's tensor fields inline, else the offset
    that disagreed with torch at import: the helper is called); ``units_seen``; ``units_native`` (checked by LLVM-compiled code),
    ``units_interpreter`` (checked by the interpreter, GUARDJIT_MODE=interpreter)
    and ``units_dynamo`` (left on Dynamo's own tree); ``guards_total`` (Dynamo's
    leaf guards in those units), ``guards_native`` (checked without calling
    Python) and ``guards_python`` (Dynamo's Python lambda guards, called as
    Python); ``native_fraction`` = guards_native / guards_total;
    ``sets_native_fraction`` = converted units / units seen;
    ``compile_ms_total`` (LLVM compile time, ms); ``shape_parts_native`` /
    ``shape_parts_python`` and ``aliasing_parts_native`` /
    ``aliasing_parts_python`` (SHAPE_ENV and object-aliasing code parts
    checked natively / left in a Python lambda); ``fallback_reasons``
    ({reason: count} for the units left on Dynamo's tree); ``pipeline`` (the
    pass pipeline run on every set, ``plugin.config.pipeline`` /
    GUARDJIT_PIPELINE), ``pipeline_sets``, ``pipeline_guards_in/out`` and
    ``pipeline_values_in/out`` (guards and accessor reads before and after it,
    summed over sets) and ``passes`` ({pass: {guards_removed, values_removed,
    us}}); ``units_empty`` (units with no guard: they keep Dynamo's empty
    root). Under ``skip_guard_eval_unsafe`` (docs/plugin.md): ``diffset_policy``
    (``plugin.config.diffset_policy`` / GUARDJIT_DIFFSET_POLICY),
    ``diffset_updates`` (one per compile of a code object with guardjit units),
    ``diffset_units``, ``diffset_guards_in`` / ``diffset_guards_out`` (per
    update and guardjit unit: its guards and its differentiating set's),
    ``diffset_opaque`` (entries checked by their full root, per update),
    ``diffset_inexact`` (units whose set is the pass's greedy answer),
    ``diffset_roots_built`` / ``diffset_roots_reused``, ``diffset_errors``
    and ``diffset_us``. ``units_not_offered`` and ``not_offered`` (one
    ``{unit, code, reason}`` per unit Dynamo built while guardjit was active
    without offering it: export; not in ``units_seen``). ``precompile``:
    units loaded from precompiled artifacts (built without Dynamo's check),
    converted at their first passing check (``deferred``,
    ``converted_at_first_check``, ``declined_at_first_check``,
    ``declined_reasons``, ``pending``), the live precompiled units guardjit
    checks (``units_live``, ``units_native``, ``check_calls``,
    ``check_failures``) and ``miss_disagreements`` (docs/serving.md).
    Empty when guardjit cannot run here.
    """
    if _compat.problems():
        return {}
    from guardjit import plugin

    return plugin.stats()

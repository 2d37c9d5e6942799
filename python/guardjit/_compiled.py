"""What ``guardjit.compile`` returns: ``torch.compile``'s own result, marked.

For an ``nn.Module``, torch.compile returns an ``OptimizedModule`` whose
``forward`` is ``dynamo_ctx(module.__call__)`` (torch/_dynamo/eval_frame.py
``OptimizedModule._initialize``). guardjit keeps that module exactly as torch
built it (its class stays ``OptimizedModule``: Dynamo unwraps only that exact
type when it traces a compiled module nested in another, ``wrap_module`` in
torch/_dynamo/variables/builder.py) and changes the class of its
``dynamo_ctx`` to :class:`GuardJitOptimizeContext`, which wraps each function
it compiles so that calls enter ``plugin.active()``. The mark therefore lives
in the context, which ``OptimizedModule.__reduce__`` pickles with the module:
``pickle``, ``torch.save``/``torch.load`` and ``copy.deepcopy`` give back a
module whose calls guardjit converts, as they give back torch's. Loading
needs guardjit importable, as loading an ``OptimizedModule`` needs torch.

A function is wrapped directly (torch returns a closure, which pickles as
little as torch's does). Every wrapper copies the attributes Dynamo reads
(``_torchdynamo_inline``, ``_torchdynamo_orig_callable``, ...), so a compiled
function called inside another compiled region is inlined as torch's is.

Imported on first use (it imports ``torch._dynamo``; ``import guardjit`` does
not, so GUARDJIT=1's import hook can install guardjit then).
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch._dynamo.eval_frame import OptimizeContext

_ready: bool | None = None


def _plugin_ready() -> bool:
    """guardjit's hooks are installed (once per process; False when guardjit
    cannot run here, after one warning)."""
    global _ready
    if _ready is None:
        # guardjit.enabled(), from _compat: the package imports this module.
        from guardjit import _compat

        _ready = _compat.verified()
        if _ready:
            from guardjit import plugin

            plugin.install_hooks()
    return _ready


def mark(compiled: Any) -> Any:
    """Wraps a callable torch.compile returned: its calls convert the compile
    units Dynamo builds while they run."""

    @functools.wraps(compiled)
    def run(*args: Any, **kwargs: Any) -> Any:
        if not _plugin_ready():
            return compiled(*args, **kwargs)
        from guardjit import plugin

        with plugin.active():
            return compiled(*args, **kwargs)

    if callable(getattr(compiled, "aot_compile", None)):
        # torch's precompile (fullgraph): its unit is guardjit's too.
        @functools.wraps(compiled.aot_compile)
        def aot_compile(*args: Any, **kwargs: Any) -> Any:
            if not _plugin_ready():
                return compiled.aot_compile(*args, **kwargs)
            from guardjit import plugin

            with plugin.active():
                return compiled.aot_compile(*args, **kwargs)

        run.aot_compile = aot_compile  # type: ignore[attr-defined]
    return run


class GuardJitOptimizeContext(OptimizeContext):
    """torch's ``OptimizeContext``; the functions it compiles are marked.

    Pickles as ``OptimizeContext`` does (its ``__reduce__`` names
    ``self.__class__``, resolved as ``guardjit.GuardJitOptimizeContext``).
    """

    _guardjit = True

    def __call__(self, fn: Any) -> Any:
        result = super().__call__(fn)
        if isinstance(result, torch.nn.Module):
            return result  # OptimizedModule(fn, self): its forward comes here
        return mark(result)


GuardJitOptimizeContext.__module__ = "guardjit"
GuardJitOptimizeContext.__qualname__ = "GuardJitOptimizeContext"


@functools.lru_cache(maxsize=None)
def _context_class(base: type) -> type:
    if base is OptimizeContext:
        return GuardJitOptimizeContext
    # A subclass torch may return one day: marked the same way (it does not
    # pickle by name, as it is built here).
    return type("GuardJit" + base.__name__, (base,),
                {"__call__": GuardJitOptimizeContext.__call__})


def mark_module(compiled: Any) -> Any:
    """Marks the OptimizedModule torch.compile returned, in place."""
    ctx = getattr(compiled, "dynamo_ctx", None)
    if not isinstance(ctx, OptimizeContext):
        return compiled  # not an OptimizedModule torch.compile made: as is
    if not getattr(type(ctx), "_guardjit", False):
        ctx.__class__ = _context_class(type(ctx))
    compiled._initialize()  # forward = dynamo_ctx(module.__call__), marked now
    return compiled

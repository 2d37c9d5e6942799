"""The Python attribute hooks guardjit reads natively (Runtime/PythonAttr.h).

``getattr``/``hasattr`` guards on ``torch.nn.Module`` instances run torch's
``Module.__getattr__`` (Python, and it raises for a missing name), and those
on ``transformers`` config objects run ``PreTrainedConfig.__getattribute__``
and the mixin ``__getattribute__`` it reaches through ``super()`` (2-3
Python frames per read). guardjit's runtime reproduces these exact functions
without running them (docs/guard-semantics.md §13). "Exact" holds only for the
code that was reviewed, so a function is registered only when its bytecode,
constants, names and signature hash to the fingerprint recorded here; any
other version keeps CPython's path (slower, never wrong) and
:func:`status` says so.

The fingerprints are for CPython 3.11 bytecode, torch 2.13.0 and
transformers 5.24.0 (the sources are quoted in docs/guard-semantics.md §13).
``tests/python/test_hasattr.py`` checks that the installed functions match.

GIL: call from Python. :func:`ensure_registered` is idempotent and cheap; the
plugin calls it before converting each compile unit (transformers may be
imported after guardjit).
"""

from __future__ import annotations

import hashlib
import sys
from typing import Any

from guardjit import _core

# sha256 of fingerprint_parts(fn) for each reviewed function.
MODULE_GETATTR = "965aba7345a091a98e414bc35587eea6270b9f313235ba6a17d4d1ee8e1eff4a"
CONFIG_GETATTRIBUTE = "fdf6535bee356248268e8988c415d1041a4eb77cbcb0a12514ba39c11f40ba7d"
HETEROGENEOUS_GETATTRIBUTE = "636136cc06fdfda2b3c9283201be714041a0180eb95784002e7da28bd2c6b9c0"
# torch.nn.ModuleList.__getitem__, _get_abs_string_index and __len__ (subtree
# skipping reads `layers[i]` as `layers._modules[str(i)]`: Runtime/SubtreeSkip.h)
MODULELIST_FUNCTIONS = {
    "__getitem__": "56089b97339cea9f60a3cf2209ad2bfcbc221681a73ac8f257d82041b96f5ec9",
    "_get_abs_string_index": "854d2c6792ae3f4fe6a73cae5dae82b3264d3a67b729f7fcf31f858763e1695d",
    "__len__": "77223b491435e5654bc712d8104c924dc5cd46b1a25acb8cdda58394cbf74b4e",
}

_status: dict[str, str] = {"torch.nn.Module.__getattr__": "not registered",
                           "transformers PreTrainedConfig.__getattribute__": "not registered",
                           "torch.nn.ModuleList.__getitem__": "not registered"}


def fingerprint_parts(fn: Any) -> tuple:
    """Everything of a function's code that decides what it does, given its
    globals, builtins and closure (which the runtime checks on every read):
    the bytecode, constants, names, variables, signature, flags and
    exception table. Line numbers and the file name are left out."""
    c = fn.__code__
    return (c.co_code, c.co_consts, c.co_names, c.co_varnames, c.co_freevars, c.co_cellvars,
            c.co_argcount, c.co_posonlyargcount, c.co_kwonlyargcount, c.co_flags,
            c.co_exceptiontable, fn.__defaults__, fn.__kwdefaults__)


def fingerprint(fn: Any) -> str:
    return hashlib.sha256(repr(fingerprint_parts(fn)).encode()).hexdigest()


def _register_module() -> None:
    key = "torch.nn.Module.__getattr__"
    if _status[key] == "registered":
        return
    import torch

    fn = torch.nn.Module.__dict__.get("__getattr__")
    if fn is None or getattr(fn, "__code__", None) is None:
        _status[key] = "missing"
        return
    if fingerprint(fn) != MODULE_GETATTR:
        _status[key] = f"unreviewed code (fingerprint {fingerprint(fn)[:12]})"
        return
    _core.register_module_getattr(fn)
    _status[key] = "registered"


def _register_modulelist() -> None:
    key = "torch.nn.ModuleList.__getitem__"
    if _status[key] == "registered":
        return
    import torch

    fns = [torch.nn.ModuleList.__dict__.get(n) for n in MODULELIST_FUNCTIONS]
    for (name, want), fn in zip(MODULELIST_FUNCTIONS.items(), fns):
        if fn is None or getattr(fn, "__code__", None) is None:
            _status[key] = f"missing {name}"
            return
        if fingerprint(fn) != want:
            _status[key] = f"unreviewed code in {name} (fingerprint {fingerprint(fn)[:12]})"
            return
    _core.register_modulelist_getitem(*fns)
    _status[key] = "registered"


def _register_config() -> None:
    key = "transformers PreTrainedConfig.__getattribute__"
    if _status[key] == "registered":
        return
    cu = sys.modules.get("transformers.configuration_utils")
    if cu is None:  # never import transformers ourselves
        return
    cls = getattr(cu, "PreTrainedConfig", None)
    outer = cls.__dict__.get("__getattribute__") if isinstance(cls, type) else None
    if outer is None or getattr(outer, "__code__", None) is None:
        _status[key] = "missing"
        return
    # What PreTrainedConfig's own super() finds; the runtime checks, per
    # config type, that its MRO leads super() to the same function.
    inner = next((k.__dict__["__getattribute__"] for k in cls.__mro__[1:]
                  if "__getattribute__" in k.__dict__), None)
    if inner is None or getattr(inner, "__code__", None) is None:
        _status[key] = "mixin __getattribute__ missing"
        return
    if fingerprint(outer) != CONFIG_GETATTRIBUTE or fingerprint(inner) != HETEROGENEOUS_GETATTRIBUTE:
        _status[key] = (f"unreviewed code (fingerprints {fingerprint(outer)[:12]}, "
                        f"{fingerprint(inner)[:12]})")
        return
    _core.register_config_getattribute(outer, inner)
    _status[key] = "registered"


def ensure_registered() -> None:
    """Registers every reviewed function that is importable now."""
    if all(v == "registered" for v in _status.values()):
        return
    _register_module()
    _register_modulelist()
    _register_config()


def status() -> dict[str, str]:
    """Per known function: "registered", "not registered" (not imported
    yet), or why it was not (e.g. unreviewed code)."""
    return dict(_status)


def stats() -> dict[str, int]:
    """Reads decided natively (module_reads, config_reads) and reads of those
    types handed back to CPython (delegated) in this process."""
    return dict(_core.known_attr_stats())


__all__ = ["ensure_registered", "status", "stats", "fingerprint", "fingerprint_parts"]

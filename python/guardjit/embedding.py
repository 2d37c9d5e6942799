"""Guard sets for C++ serving hosts (``include/guardjit/guardjit.h``).

:func:`compile_for_host` compiles a function with guardjit, calls it once and
returns, per compile unit, what a host needs to check the unit natively and
dispatch without Dynamo (docs/embedding.md):

* ``gir``: the checked set's ``.gir`` text with the version header
  (:func:`version_header`) and a binding name on every object
  (:func:`binding_name`);
* ``objects``: the object of every table entry, in table order (for a host's
  bind callback);
* ``dispatch``: the code Dynamo runs after its guards pass (the cache entry's
  transformed bytecode, which calls the compiled graph), as a plain function
  of the original arguments. Calling it outside ``torch.compile`` runs no
  frame hook, so no guard is evaluated a second time.

Binding names (the scheme docs/embedding.md defines):

* ``lit:<repr>``: a str, int, float, bool, None, bytes or tuple of them whose
  repr reads back (``ast.literal_eval``) as an equal object of the same type;
* ``py:<module>[.<attr>...]``: a module, a module's ``__dict__``
  (``py:<module>.__dict__``), or an object reached from an importable module
  by attributes (classes and functions by ``__module__`` + ``__qualname__``);
* ``host:<set>#<N>``: anything else (a model instance, a lambda guard, a
  torch state object): the host supplies it by this name.
"""

from __future__ import annotations

import ast
import ctypes
import dataclasses
import importlib
import re
import sys
import types
from typing import Any

import torch

import guardjit
from guardjit import plugin

_LITERAL_TYPES = (str, int, float, bool, type(None), bytes)


def version_header() -> str:
    """The ``gir`` header line of a set recorded in this process."""
    return f'gir torch="{torch.__version__}" guardjit="{guardjit.__version__}"\n'


def _quote(s: str) -> str:
    """A .gir string literal, as the C++ printer writes it (quoteString)."""
    out = ['"']
    for ch in s:
        c = ord(ch)
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif c < 0x20 or c == 0x7F:
            out.append(f"\\x{c:02x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _is_literal(obj: Any) -> bool:
    if type(obj) is tuple:
        return all(_is_literal(o) for o in obj)
    return type(obj) in _LITERAL_TYPES


def _resolve(path: str) -> Any:
    parts = path.split(".")
    for n in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:n]))
        except ImportError:
            continue
        for p in parts[n:]:
            obj = getattr(obj, p)
        return obj
    raise ImportError(path)


def binding_name(obj: Any, fallback: str) -> str:
    """The binding name of ``obj`` (module docstring), ``fallback`` if none."""
    if _is_literal(obj):
        r = repr(obj)
        try:
            back = ast.literal_eval(r)
            if type(back) is type(obj) and back == obj:
                return "lit:" + r
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            pass
    if isinstance(obj, types.ModuleType) and sys.modules.get(obj.__name__) is obj:
        return "py:" + obj.__name__
    if type(obj) is dict:
        for name, mod in list(sys.modules.items()):
            if getattr(mod, "__dict__", None) is obj:
                return f"py:{name}.__dict__"
    mod, qual = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if isinstance(mod, str) and isinstance(qual, str) and "<" not in qual:
        try:
            if _resolve(f"{mod}.{qual}") is obj:
                return f"py:{mod}.{qual}"
        except Exception:
            pass
    # Built-ins re-exported by their module under their plain name
    # (torch.relu's qualname is _VariableFunctionsClass.relu).
    name = getattr(obj, "__name__", None)
    if isinstance(mod, str) and isinstance(name, str) and isinstance(
            obj, (types.BuiltinFunctionType, types.FunctionType)):
        try:
            if getattr(sys.modules[mod], name) is obj:
                return f"py:{mod}.{name}"
        except Exception:
            pass
    return fallback


_OBJECT_LINE = re.compile(r"^(  object #(\d+) = .*)$")


def _objects_of(ir: Any) -> list:
    # The addresses are live PyObject*s: the unit's bound set holds the strong
    # entries, the model and the interpreter the others, while the unit lives.
    return [ctypes.cast(a, ctypes.py_object).value for a in ir.object_addresses()]


def named_text(ir: Any, objects: list) -> str:
    """``ir``'s .gir text with the version header and ``name=`` on every object."""
    set_name = ir.name
    lines = []
    for line in ir.print().splitlines():
        m = _OBJECT_LINE.match(line)
        if m:
            k = int(m.group(2))
            line += " name=" + _quote(binding_name(objects[k], f"host:{set_name}#{k}"))
        lines.append(line)
    return version_header() + "\n" + "\n".join(lines) + "\n"


@dataclasses.dataclass
class HostUnit:
    """One compile unit, ready for a C++ host."""

    name: str  # Dynamo's compile id, e.g. "0/0"
    gir: str  # header + named .gir text of the checked set
    objects: list  # the object of each table entry, in order
    dispatch: Any  # the transformed code as a function of the original args
    status: str  # "native" or "interpreter"
    dynamo_root: Any = None  # Dynamo's own guard tree (for comparisons)


def _dispatch_function(fn: Any, compile_id: str) -> Any:
    from torch._C._dynamo.eval_frame import _debug_get_cache_entry_list

    code = fn.__code__
    for entry in _debug_get_cache_entry_list(code):
        if str(entry.compile_id) == compile_id:
            return types.FunctionType(entry.code, fn.__globals__, code.co_name + "_compiled",
                                      fn.__defaults__, fn.__closure__)
    raise RuntimeError(f"no cache entry {compile_id} on {code.co_name}")


def compile_for_host(fn: Any, *args: Any, backend: str = "eager", dynamic: bool | None = None,
                     **kwargs: Any) -> list[HostUnit]:
    """Compiles plain function ``fn`` with guardjit, calls it once on ``args``
    and returns its converted units (those left on Dynamo's path are not)."""
    if not isinstance(fn, types.FunctionType):
        raise TypeError("compile_for_host takes a plain Python function (wrap a model in one)")
    keep = plugin.config.keep_units
    plugin.config.keep_units = True
    plugin.clear_units()
    try:
        guardjit.compile(fn, backend=backend, dynamic=dynamic)(*args, **kwargs)
        units = [u for u in plugin.units() if u.status != "dynamo"]
    finally:
        plugin.config.keep_units = keep
    out = []
    for u in units:
        objects = _objects_of(u.ir)
        out.append(HostUnit(u.name, named_text(u.ir, objects), objects,
                            _dispatch_function(fn, u.name), u.status, u.dynamo_root))
    plugin.clear_units()
    return out

"""Dynamo's object-aliasing code parts as OBJECT_ALIASING guards.

torch 2.13 (``config.use_lamba_guard_for_object_aliasing = True``, the
default) does not install OBJECT_ALIASING for ``GuardBuilder.DUPLICATE_INPUT``:
it keeps the code part ``f"{ref_b} is {ref_a}"`` (two source names) and
``CheckFunctionManager.compile_check_fn`` joins the parts of all such guards
into ONE epilogue lambda, ``def guard(L): if not (<part>): return False ...;
return True`` with globals ``{"G": f_globals}``. The lambda passes iff every
part evaluates, without raising, to True; so each part is an independent
conjunct.

:class:`SourceReader` reads each side of a part as an IR value:

* a sub-expression whose text is the source of a value Dynamo's tree reads
  is that value only when the tree read it with the semantics Python gives
  the text, all the way up to ``L``/``G``: ``x.a`` shares a ``getattr``
  read of ``a`` on the shared ``x``, never the tree's
  ``x.__dict__['a']`` (a class-level descriptor named ``a``, e.g. a
  property that raises, makes the text and the ``__dict__`` read differ:
  found by the mutation fuzzer, docs/fuzzing.md); ``x[k]`` shares a
  ``get_item`` read, never a ``dict_get_item`` one (a dict subclass may
  override ``__getitem__``);
* anything else is read with the semantics Python gives the text:
  ``L['n']`` / ``G['n']`` probe the frame-locals dict and the captured
  globals dict (exact dicts: a probe is ``BINARY_SUBSCR``), ``x.a`` and
  ``getattr(x, 'a')`` are ``PyObject_GetAttr`` (the ``getattr`` accessor),
  ``x[k]`` for a constant ``k`` is ``PyObject_GetItem`` (``get_item``),
  ``type(x)`` is ``Py_TYPE`` (when ``type`` is the builtin);
* any other construct is refused (:class:`Unsupported`): that part stays a
  Python lambda, counted as one in ``guardjit.stats()``.

A read that fails (AttributeError, KeyError...) fails the check, as the
exception fails Dynamo's lambda. Reads of the second kind are new values in
the IR, shared by the later parts of the same lambda that read the same text
(torch's non-lambda form reads each source once too). They are never merged
with other reads: ``getattr``/``get_item`` may run Python code. What this
sharing gives up: an attribute that, after the compile, becomes a descriptor
whose getter returns a different object on every call is read once per check
instead of once per part.
"""

from __future__ import annotations

import ast
import builtins
from collections.abc import Callable
from typing import Any

__all__ = ["Unsupported", "SourceReader", "parse_part"]

_BUILTINS = {"type": type, "getattr": getattr}


class Unsupported(Exception):
    """A code part (or one side of it) that is not read natively."""


def parse_part(code: str) -> tuple[ast.AST, ast.AST]:
    """The two sides of ``<b> is <a>``, or Unsupported."""
    try:
        tree = ast.parse(code, mode="eval").body
    except SyntaxError as e:
        raise Unsupported(f"syntax: {e}") from None
    if (not isinstance(tree, ast.Compare) or len(tree.ops) != 1
            or not isinstance(tree.ops[0], ast.Is)):
        raise Unsupported(f"not `a is b`: {code}")
    return tree.left, tree.comparators[0]


def _constant_key(node: ast.AST) -> Any:
    """A subscript's constant key (str, int, negative int), or Unsupported."""
    if isinstance(node, ast.Constant) and type(node.value) in (str, int):
        return node.value
    if (isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub)
            and isinstance(node.operand, ast.Constant) and type(node.operand.value) is int):
        return -node.operand.value
    raise Unsupported(f"a subscript that is not a str or int constant: {ast.unparse(node)}")


class SourceReader:
    """Reads the sides of aliasing code parts as values of one recording.

    ``resolve(text) -> (value id, (kind, parent id, key)) | None``: the value
    Dynamo's tree reads for a source text (not a tensor property) and how it
    reads it. ``add_value(kind, parent, source,
    name, key) -> value id`` adds a read (``key`` is the object it needs, or
    None). ``globals_value() -> value id``: the ``globals`` value of the
    lambda's ``G``. ``g_scope``: that dict. ``scope``: the lambda's other
    names (its closure variables), which may shadow builtins.
    """

    def __init__(self, resolve: Callable[[str], int | None],
                 add_value: Callable[[str, int, str, str, Any], int],
                 globals_value: Callable[[], int], g_scope: Any,
                 scope: dict[str, Any]) -> None:
        self.resolve = resolve
        self.add_value = add_value
        self.globals_value = globals_value
        self.g_scope = g_scope
        self.scope = scope

    def read(self, code: str, node: ast.AST) -> int:
        """The value id of ``node`` (a sub-expression of ``code``)."""
        text = ast.get_source_segment(code, node)
        if text is None:
            raise Unsupported(f"no source text for {ast.unparse(node)}")
        found = self.resolve(text)
        if found is not None and self._matches(code, node, found[0]):
            return found[0]
        if isinstance(node, ast.Name):
            if node.id == "L":
                return 0
            if node.id == "G":
                return self.globals_value()
            raise Unsupported(f"a free name: {node.id}")
        if isinstance(node, ast.Attribute):
            return self.add_value("getattr", self.read(code, node.value), text, node.attr,
                                  node.attr)
        if isinstance(node, ast.Subscript):
            key = _constant_key(node.slice)
            base = node.value
            if isinstance(base, ast.Name) and base.id == "L" and type(key) is str:
                # The frame-locals dict is an exact dict (the check's
                # argument, verified by the plugin), so L['n'] is a probe.
                return self.add_value("frame_local", 0, text, key, key)
            if (isinstance(base, ast.Name) and base.id == "G" and type(key) is str
                    and type(self.g_scope) is dict):
                return self.add_value("dict_get_item", self.globals_value(), text, key, key)
            return self.add_value("get_item", self.read(code, base), text,
                                  key if type(key) is str else "", key)
        if isinstance(node, ast.Call) and not node.keywords and isinstance(node.func, ast.Name):
            fn = node.func.id
            if fn == "type" and len(node.args) == 1 and self._is_builtin("type"):
                return self.add_value("type", self.read(code, node.args[0]), text, "", None)
            if (fn == "getattr" and len(node.args) == 2 and self._is_builtin("getattr")
                    and isinstance(node.args[1], ast.Constant)
                    and type(node.args[1].value) is str):
                attr = node.args[1].value
                return self.add_value("getattr", self.read(code, node.args[0]), text, attr, attr)
        raise Unsupported(f"{type(node).__name__}: {text}")

    def _matches(self, code: str, node: ast.AST, vid: int) -> bool:
        """Whether Dynamo's tree reads value ``vid`` as Python evaluates
        ``node``: the same accessor at every step up to L or G. Adds nothing."""
        if isinstance(node, ast.Name):
            if node.id == "L":
                return vid == 0
            if node.id == "G":
                try:
                    return vid == self.globals_value()
                except Unsupported:
                    return False
            return False
        text = ast.get_source_segment(code, node)
        found = self.resolve(text) if text is not None else None
        if found is None or found[0] != vid:
            return False
        kind, parent, key = found[1]
        if isinstance(node, ast.Attribute):
            return (kind == "getattr" and key == node.attr
                    and self._matches(code, node.value, parent))
        if isinstance(node, ast.Subscript):
            base = node.value
            try:
                k = _constant_key(node.slice)
            except Unsupported:
                return False
            if type(key) is not type(k) or key != k:
                return False
            if isinstance(base, ast.Name) and base.id == "L" and type(k) is str:
                return kind == "frame_local" and parent == 0
            if (isinstance(base, ast.Name) and base.id == "G" and type(k) is str
                    and type(self.g_scope) is dict):
                return kind == "dict_get_item" and self._matches(code, base, parent)
            return kind == "get_item" and self._matches(code, base, parent)
        return False

    def _is_builtin(self, name: str) -> bool:
        # The lambda's globals are {"G": f_globals}: a name that is not one
        # of its closure variables is looked up in builtins.
        # builtins (and the builtin itself, not a replacement).
        return name not in self.scope and getattr(builtins, name, None) is _BUILTINS[name]

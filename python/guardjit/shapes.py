"""Translates Dynamo's SHAPE_ENV code parts into Guard IR shape expressions.

With ``dynamic=True`` (or automatic dynamic), Dynamo's ``GuardBuilder.SHAPE_ENV``
turns the shape environment's guards into Python expression strings (code
parts) such as ``L['x'].stride()[0] == L['x'].size()[1]`` or
``((2 + L['x'].size()[0]) // 3) != 1`` and installs them as ONE epilogue
lambda, ``def guard(L): if not (part): return False ...; return True``
(``add_python_lambda_leaf_guard_to_root``). The lambda passes iff every part
evaluates to a true value without raising, so each part is an independent
conjunct: a part translated here becomes one ``shape_expr`` guard; the parts
that are not translated stay together in one Python epilogue lambda.

Translation is exact or refused. Operands are the IR values Dynamo guards:
``<src>.size()[i]`` / ``.stride()[i]`` / ``.storage_offset()`` of a tensor
whose TENSOR_MATCH pins an exact ``torch.Tensor`` or ``nn.Parameter`` type
(so ``size()`` is torch's), and plain ``int`` / ``float`` sources (read with
exact-type tests at run time). Every translated part carries its own Python
fallback, called only when int64 / double cannot decide (docs/guard-semantics.md).
"""

from __future__ import annotations

import ast
import builtins
import math
from typing import Any, Callable

import torch

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1

_BINOPS = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.FloorDiv: "floordiv",
           ast.Mod: "mod", ast.Div: "truediv"}
_CMPOPS = {ast.Eq: "eq", ast.NotEq: "ne", ast.Lt: "lt", ast.LtE: "le", ast.Gt: "gt",
           ast.GtE: "ge"}
_TENSOR_PROPS = {"size": "tensor_size", "stride": "tensor_stride",
                 "storage_offset": "tensor_storage_offset"}
# TENSOR_MATCH types whose size()/stride()/storage_offset() are torch's own.
_PLAIN_TENSOR_TYPES = (torch.Tensor, torch.nn.Parameter)


class Unsupported(Exception):
    """A code part (or a construct in it) that is not translated."""


class Operands:
    """Maps the IR values a part reads to operand slots ``$i``."""

    def __init__(self) -> None:
        self.values: list[int] = []
        self.kinds: list[str] = []

    def slot(self, vid: int, kind: str) -> int:
        for i, (v, k) in enumerate(zip(self.values, self.kinds)):
            if v == vid:
                if k != kind:
                    raise Unsupported("a value read both as int and as float")
                return i
        self.values.append(vid)
        self.kinds.append(kind)
        return len(self.values) - 1


class Translator:
    """Translates code parts against one recording.

    ``resolve(source_text) -> (value id, example value, tensor pytype or None)``
    finds the IR value Dynamo built for a source; ``tensor_property(vid, kind,
    index, source) -> value id`` gets or adds a tensor property value.
    ``scope`` is the guard function's namespace (closure vars and ``G``).
    """

    def __init__(self, resolve: Callable[[str], Any],
                 tensor_property: Callable[[int, str, int, str], int],
                 scope: dict[str, Any]) -> None:
        self.resolve = resolve
        self.tensor_property = tensor_property
        self.scope = scope

    def translate(self, code: str) -> tuple[str, list[int]]:
        """Returns (expression text, operand value ids) or raises Unsupported."""
        try:
            tree = ast.parse(code, mode="eval")
        except SyntaxError as e:
            raise Unsupported(f"syntax: {e}") from None
        ops = Operands()
        text, ty = self._expr(tree.body, ops)
        if ty != "bool":
            # `if not (x)` of a number: its truth, x != 0 (NaN is true).
            text, ty = f"(ne {text} 0)", "bool"
        if not ops.values:
            raise Unsupported("a part without operands")
        return text, ops.values

    # -- expressions: each returns (text, type) with type int | float | bool --

    def _expr(self, node: ast.AST, ops: Operands) -> tuple[str, str]:
        if isinstance(node, ast.Constant):
            return self._constant(node.value)
        if isinstance(node, ast.UnaryOp):
            if isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant):
                return self._constant(-node.operand.value) \
                    if _is_number(node.operand.value) else self._unsupported(node)
            text, ty = self._expr(node.operand, ops)
            if isinstance(node.op, ast.Not):
                return self._need(f"(not {text})", "bool", [ty], "bool")
            if isinstance(node.op, ast.USub):
                return self._need(f"(neg {text})", ty, [ty], "number")
            if isinstance(node.op, ast.UAdd):
                return self._need(text, ty, [ty], "number")
            return self._unsupported(node)
        if isinstance(node, ast.BinOp):
            op = _BINOPS.get(type(node.op))
            if op is None:
                return self._unsupported(node)
            a, ta = self._expr(node.left, ops)
            b, tb = self._expr(node.right, ops)
            if op in ("floordiv", "mod"):
                return self._need(f"({op} {a} {b})", "int", [ta, tb], "int")
            ty = "float" if op == "truediv" or "float" in (ta, tb) else "int"
            return self._need(f"({op} {a} {b})", ty, [ta, tb], "number")
        if isinstance(node, ast.Compare):
            parts = []
            left = node.left
            for op_node, right in zip(node.ops, node.comparators):
                op = _CMPOPS.get(type(op_node))
                if op is None:
                    return self._unsupported(node)
                a, ta = self._expr(left, ops)
                b, tb = self._expr(right, ops)
                parts.append(self._need(f"({op} {a} {b})", "bool", [ta, tb], "number")[0])
                left = right
            if len(parts) == 1:
                return parts[0], "bool"
            return f"(and {' '.join(parts)})", "bool"
        if isinstance(node, ast.BoolOp):
            op = "and" if isinstance(node.op, ast.And) else "or"
            items = [self._expr(v, ops) for v in node.values]
            return self._need(f"({op} {' '.join(t for t, _ in items)})", "bool",
                              [ty for _, ty in items], "bool")
        if isinstance(node, ast.Call):
            return self._call(node, ops)
        if isinstance(node, ast.Name) and node.id in ("inf", "nan"):
            value = self.scope.get(node.id)
            if isinstance(value, float) and (math.isinf(value) or math.isnan(value)):
                return self._constant(value)
        return self._operand(node, ops)

    def _call(self, node: ast.Call, ops: Operands) -> tuple[str, str]:
        if node.keywords:
            return self._unsupported(node)
        func = node.func
        # math.isnan(x)
        if (isinstance(func, ast.Attribute) and func.attr == "isnan"
                and isinstance(func.value, ast.Name)
                and self.scope.get(func.value.id) is math and len(node.args) == 1):
            a, ta = self._expr(node.args[0], ops)
            return self._need(f"(isnan {a})", "bool", [ta], "float")
        if isinstance(func, ast.Name) and self._is_builtin(func.id):
            args = [self._expr(a, ops) for a in node.args]
            types = [t for _, t in args]
            texts = " ".join(t for t, _ in args)
            if func.id in ("min", "max") and len(args) >= 2:
                if len(set(types)) != 1 or types[0] not in ("int", "float"):
                    return self._unsupported(node)
                return f"({func.id} {texts})", types[0]
            if func.id == "abs" and len(args) == 1:
                return self._need(f"(abs {texts})", types[0], types, "number")
            if func.id == "float" and len(args) == 1 and types[0] == "int":
                return f"(to_float {texts})", "float"
        # Not a known function: maybe a tensor property (a call inside).
        return self._operand(node, ops)

    def _is_builtin(self, name: str) -> bool:
        target = getattr(builtins, name, None)
        return target is not None and self.scope.get(name, target) is target

    def _operand(self, node: ast.AST, ops: Operands) -> tuple[str, str]:
        # <src>.size()[i], <src>.stride()[i]
        if (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Call)
                and isinstance(node.value.func, ast.Attribute)
                and node.value.func.attr in ("size", "stride")
                and not node.value.args and not node.value.keywords
                and isinstance(node.slice, ast.Constant) and type(node.slice.value) is int
                and node.slice.value >= 0):
            return self._tensor_property(node.value.func.value, node.value.func.attr,
                                         node.slice.value, node, ops)
        # <src>.storage_offset()
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "storage_offset" and not node.args
                and not node.keywords):
            return self._tensor_property(node.func.value, "storage_offset", -1, node, ops)
        # A plain source: an int or float local, attribute, item...
        source = ast.unparse(node)
        found = self.resolve(source)
        if found is None:
            raise Unsupported(f"no IR value for {source}")
        vid, example, _pytype = found
        if type(example) is int:
            return f"(int ${ops.slot(vid, 'int')})", "int"
        if type(example) is float:
            return f"(float ${ops.slot(vid, 'float')})", "float"
        raise Unsupported(f"{source} is a {type(example).__name__}")

    def _tensor_property(self, tensor_node: ast.AST, prop: str, index: int,
                         node: ast.AST, ops: Operands) -> tuple[str, str]:
        source = ast.unparse(tensor_node)
        found = self.resolve(source)
        if found is None:
            raise Unsupported(f"no IR value for {source}")
        vid, _example, pytype = found
        if pytype not in _PLAIN_TENSOR_TYPES:
            raise Unsupported(f"{source} has no TENSOR_MATCH of a plain tensor type")
        pvid = self.tensor_property(vid, _TENSOR_PROPS[prop], index, ast.unparse(node))
        return f"(int ${ops.slot(pvid, 'int')})", "int"

    @staticmethod
    def _constant(value: Any) -> tuple[str, str]:
        if type(value) is int:
            if not _INT64_MIN <= value <= _INT64_MAX:
                raise Unsupported("an int constant beyond int64")
            return str(value), "int"
        if type(value) is float:
            if math.isnan(value):
                return "nan", "float"
            if math.isinf(value):
                return ("inf" if value > 0 else "-inf"), "float"
            text = repr(value)
            return text, "float"
        raise Unsupported(f"a {type(value).__name__} constant")

    @staticmethod
    def _need(text: str, result: str, types: list[str], want: str) -> tuple[str, str]:
        for ty in types:
            ok = ty in ("int", "float") if want == "number" else ty == want
            if not ok:
                raise Unsupported(f"a {ty} where {want} is needed")
        return text, result

    @staticmethod
    def _unsupported(node: ast.AST) -> tuple[str, str]:
        raise Unsupported(f"{type(node).__name__}: {ast.unparse(node)}")


def _is_number(value: Any) -> bool:
    return type(value) in (int, float)


def python_guard(parts: list[str], scope: dict[str, Any]) -> Callable[[dict], bool]:
    """``fn(L)`` for `parts` with the exact truth rules of Dynamo's guard
    function: each part must be true (``not not`` raises where ``if not``
    raises), a raise fails the guard (LAMBDA_GUARD clears it)."""
    body = " and ".join(f"(not not ({p}))" for p in parts) or "True"
    return eval(f"lambda L: {body}", dict(scope))  # noqa: S307 - Dynamo's own code

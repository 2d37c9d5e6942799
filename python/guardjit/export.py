"""``python -m guardjit export MODULE:FACTORY --out DIR``: one .gir per compile unit.

FACTORY is a callable in MODULE returning either a
:class:`guardjit.models.ModelCase` or a tuple ``(model, example_args)``. The
model is compiled with guardjit, called once, and the Guard IR of every
compile unit it produced is written as ``DIR/<name>.<compile id>.gir``. Units
that stayed on Dynamo's path are listed with their reason (their IR may be
incomplete and is not written).
"""

from __future__ import annotations

import importlib
import os
import re
import sys
from typing import Any

import torch

import guardjit
from guardjit import models, plugin


def load_factory(spec: str) -> Any:
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"expected MODULE:FACTORY, got {spec!r}")
    obj: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def export(spec: str, out_dir: str, backend: str = "eager") -> list[str]:
    """Compiles the factory's model and writes its units' IR; returns the paths."""
    made = load_factory(spec)()
    if isinstance(made, models.ModelCase):
        name, model, args = made.name, made.model, made.make_input()
    else:
        model, args = made
        name = spec.partition(":")[2]
    torch._dynamo.reset()
    plugin.clear_units()
    plugin.config.keep_units = True
    try:
        guardjit.compile(model, backend=backend)(*args)
        units = plugin.units()
    finally:
        plugin.config.keep_units = False
        plugin.clear_units()
    os.makedirs(out_dir, exist_ok=True)
    paths = []
    for u in units:
        if u.status == "dynamo":
            print(f"{name}: compile unit {u.name} stayed on Dynamo's path ({u.reason}); "
                  "not written", file=sys.stderr)
            continue
        safe = re.sub(r"[^A-Za-z0-9_.-]", "_", f"{name}.{u.name}")
        path = os.path.join(out_dir, safe + ".gir")
        with open(path, "w") as f:
            f.write(u.ir.print())
        paths.append(path)
    return paths


def main(spec: str, out_dir: str, backend: str) -> int:
    if not guardjit.enabled():
        return 2
    try:
        paths = export(spec, out_dir, backend)
    except (ValueError, ImportError, AttributeError) as e:
        print(f"guardjit export: error: {e}", file=sys.stderr)
        return 1
    for p in paths:
        print(p)
    return 0 if paths else 1

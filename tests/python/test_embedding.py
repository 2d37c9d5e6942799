"""guardjit.embedding: what a C++ host (guardjit.h) gets from Python."""

from __future__ import annotations

import collections
import os
import subprocess
import sysconfig

import torch

import guardjit
from guardjit import embedding

GUARD_IR_OPT = os.path.join(sysconfig.get_path("scripts"), "guard-ir-opt")


class _Local:
    pass


def test_binding_names():
    assert embedding.binding_name("x", "host:f") == "lit:'x'"
    assert embedding.binding_name((1, 2.5, None), "host:f") == "lit:(1, 2.5, None)"
    assert embedding.binding_name(float("nan"), "host:f") == "host:f"  # no literal
    assert embedding.binding_name(torch, "host:f") == "py:torch"
    assert embedding.binding_name(torch.Tensor, "host:f") == "py:torch.Tensor"
    assert embedding.binding_name(torch.nn.Parameter, "host:f") == \
        "py:torch.nn.parameter.Parameter"
    assert embedding.binding_name(collections.OrderedDict, "host:f") == \
        "py:collections.OrderedDict"
    assert embedding.binding_name(vars(collections), "host:f") == "py:collections.__dict__"
    assert embedding.binding_name(torch.relu, "host:f") == "py:torch.relu"
    assert embedding.binding_name(_Local(), "host:f") == "host:f"
    assert embedding.binding_name(lambda: 0, "host:f") == "host:f"


def test_quote_matches_the_printer():
    assert embedding._quote('a"b\\c\n\t\x01é') == '"a\\"b\\\\c\\n\\t\\x01é"'


def _step(model, x):
    return model(x)


def test_compile_for_host_text_objects_and_dispatch():
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU()).eval()
    x = torch.randn(2, 4)
    with torch.no_grad():
        (unit,) = embedding.compile_for_host(_step, model, x)
        assert torch.equal(unit.dispatch(model, x), model(x))
    assert unit.gir.startswith(
        f'gir torch="{torch.__version__}" guardjit="{guardjit.__version__}"\n\n')
    object_lines = [ln for ln in unit.gir.splitlines() if ln.startswith("  object #")]
    assert len(object_lines) == len(unit.objects)
    assert all(" name=" in ln for ln in object_lines)
    # guard-ir-opt reads the header and names and prints them back exactly.
    out = subprocess.run([GUARD_IR_OPT, "-"], input=unit.gir, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout == unit.gir
    # py: and lit: names resolve to the very objects of the table.
    for ln, obj in zip(object_lines, unit.objects):
        name = ln.rsplit(' name="', 1)[1][:-1]
        if name.startswith("py:"):
            assert embedding._resolve(name[3:]) is obj, name
        elif name.startswith("lit:"):
            import ast
            assert ast.literal_eval(name[4:]) == obj, name

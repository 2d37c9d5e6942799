"""``python -m guardjit export`` writes .gir files that guard-ir-opt reads back
byte for byte."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig

import torch

import guardjit
from guardjit import export

# `pip install .` puts the tool beside the interpreter's scripts.
GUARD_IR_OPT = os.path.join(sysconfig.get_path("scripts"), "guard-ir-opt")


def test_export_writes_one_gir_per_unit(tmp_path):
    paths = export.export("guardjit.models:two_input_mlp", str(tmp_path))
    assert len(paths) == 1
    with open(paths[0]) as f:
        text = f.read()
    assert text.startswith(f'gir torch="{torch.__version__}" guardjit="{guardjit.__version__}"\n\n'
                           'guard_set ')
    assert "guard tensor_match" in text and "guard no_tensor_aliasing" in text


def test_exported_ir_round_trips_through_guard_ir_opt(tmp_path):
    for factory in ("transformer", "cnn", "two_input_mlp"):
        (path,) = export.export(f"guardjit.models:{factory}", str(tmp_path / factory))
        out = subprocess.run([GUARD_IR_OPT, path], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        with open(path) as f:
            assert out.stdout == f.read()


def test_bad_factory_is_a_clear_error(tmp_path):
    r = subprocess.run([sys.executable, "-m", "guardjit", "export", "no_such_module:f",
                        "--out", str(tmp_path)], capture_output=True, text=True)
    assert r.returncode == 1
    assert "guardjit export: error:" in r.stderr


def test_stable_text_drops_what_changes_between_processes():
    from guardjit import stable_text

    text = ("G['_139730387299568_c0'].Tensor ___check_obj_id(L['x'], 1407223) "
            "<function f at 0x7f8087d31b60>")
    assert stable_text.normalize(text) == (
        "G['_<id>_c0'].Tensor ___check_obj_id(L['x'], <id>) <function f>")
    # Not an id: short numbers and other suffixes stay.
    assert stable_text.normalize("G['_12_c0'] x_1234567_d1") == "G['_12_c0'] x_1234567_d1"

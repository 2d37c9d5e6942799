"""``guardjit.advise`` and ``python -m guardjit advise`` (docs/advise.md): every
report field, the command line, and the verdicts on unsafe options checked
by hand against eager and plain torch."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import torch
from torch import nn

import guardjit
import guardjit.advise
from guardjit import advise as advise_mod
from guardjit.advise import (BITE_FIELDS, CHANGE_FIELDS, GROUP_FIELDS, LAYER_FIELDS,
                             OPTION_FIELDS, REPORT_FIELDS, SIDE_FIELDS, UNIT_FIELDS, Settings)
from guardjit.advise_measure import SIDES
from guardjit.advise_safety import OPTIONS
from guardjit.bench.run import SideBackend

GAIN = 1.5  # a global the model reads: skip_guard_on_globals_unsafe drops its guard

TINY = Settings(rounds=2, profile_calls=4, target_ms=0.1, depth=2, groups=1, changes=6)


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.lin(x))


class Scaled(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([Block(), Block()])
        self.scale = 2.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x * self.scale * GAIN


def _model() -> Scaled:
    torch.manual_seed(0)
    return Scaled().eval()


def _report() -> dict:
    return guardjit.advise(_model(), (torch.randn(2, 4),), [(torch.randn(2, 4),)],
                           name="scaled", settings=TINY)


def _check_fields(r: dict) -> None:
    assert r["schema"] == advise_mod.SCHEMA
    assert set(REPORT_FIELDS) <= set(r)
    assert list(r["sides"]) == list(SIDES)
    for name, side in r["sides"].items():
        assert side["status"] == "ok", (name, side)
        assert set(SIDE_FIELDS) <= set(side), name
        assert side["call_us"] > 0
    assert r["sides"]["guardjit"]["lookup_us"] > 0
    assert r["sides"]["guardjit"]["check_us"] > 0
    units = r["guards"]["units"]
    assert units
    for u in units:
        assert set(UNIT_FIELDS) <= set(u)
        assert sum(g["guards"] for g in u["groups"]) == u["guards"]
        for g in u["groups"]:
            assert set(GROUP_FIELDS) <= set(g)
    measured = [g for u in units for g in u["groups"] if g["cost_us"] is not None]
    assert len(measured) == 1 and measured[0]["group"] == r["guards"]["measured_groups"][0]
    assert set(LAYER_FIELDS) <= set(r["layers"])
    assert set(r["unsafe"]["options"]) == set(OPTIONS) | {"guardjit"}
    for o in r["unsafe"]["options"].values():
        assert set(OPTION_FIELDS) <= set(o)
        for b in o["bites"]:
            assert set(BITE_FIELDS) <= set(b)
    for c in r["unsafe"]["changes"]:
        assert set(CHANGE_FIELDS) <= set(c)
    json.dumps(r)  # JSON-able


def test_advise_reports_every_field_and_its_verdicts_hold():
    r = _report()
    _check_fields(r)
    assert r["layers"]["container"] == "self.layers" and r["layers"]["count"] == 2
    assert callable(guardjit.advise)  # the module (import guardjit.advise) is the call
    opts = r["unsafe"]["options"]
    tried = {c["source"] for c in r["unsafe"]["changes"] if c["eager_error"] is None}
    assert {"self.scale", "G['GAIN']", "<inputs>"} <= tried, tried
    # Called unsafe, each on the change it names...
    nn_all = opts["skip_guard_on_all_nn_modules_unsafe"]
    assert not nn_all["safe"] and "self.scale" in {b["source"] for b in nn_all["bites"]}
    assert "serves a stale graph when self.scale changes" in nn_all["verdict"]
    glob = opts["skip_guard_on_globals_unsafe"]
    assert not glob["safe"] and [b["source"] for b in glob["bites"]] == ["G['GAIN']"]
    # ... called safe: guardjit and torch's dict tags.
    assert opts["guardjit"]["safe"] and opts["use_recursive_dict_tags_for_guards"]["safe"]
    assert opts["guardjit"]["verdict"].startswith("safe on everything tried")

    # By hand, against eager and plain torch: the unsafe filter serves the
    # stale graph on the change advise names; the safe option answers right
    # on the warm-up input and the same changes.
    global GAIN
    model = _model()
    x, w = torch.randn(2, 4), torch.randn(2, 4)
    with torch.no_grad():
        torch._dynamo.reset()
        plain = torch.compile(model, backend=SideBackend("eager", "plain"))
        unsafe = torch.compile(model, backend=SideBackend("eager", "nn-all"), options={
            "guard_filter_fn": torch.compiler.skip_guard_on_all_nn_modules_unsafe})
        tags = torch.compile(model, backend=SideBackend("eager", "tags"))
        with torch._dynamo.config.patch(use_recursive_dict_tags_for_guards=True):
            for m in (plain, unsafe, tags):
                m(x)
                m(w)
            assert torch.equal(tags(w), model(w)) and torch.equal(plain(w), model(w))
            model.scale = 3.0
            try:
                want = model(x)
                assert torch.equal(plain(x), want)
                assert not torch.equal(unsafe(x), want)  # the stale graph
                assert torch.equal(tags(x), want)
            finally:
                model.scale = 2.0
            saved = GAIN
            GAIN = 4.0
            try:
                want = model(x)
                assert torch.equal(plain(x), want) and torch.equal(tags(x), want)
            finally:
                GAIN = saved


def test_cli_factory_and_json(tmp_path):
    out = tmp_path / "advise.json"
    env = dict(os.environ)
    r = subprocess.run([sys.executable, "-m", "guardjit", "advise", "guardjit.models:two_input_mlp",
                        "--quick", "--json", str(out), "--no-progress", "--groups", "1",
                        "--changes", "3", "--rounds", "2"],
                       capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "1. Per call" in r.stdout and "3. Which unsafe switch would bite" in r.stdout
    report = json.loads(out.read_text())
    assert report["model"] == "two-input-mlp"
    assert set(REPORT_FIELDS) <= set(report)
    assert set(report["unsafe"]["options"]) == set(OPTIONS) | {"guardjit"}


def test_cli_bad_factory_is_a_clear_error():
    r = subprocess.run([sys.executable, "-m", "guardjit", "advise", "guardjit.models"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "MODULE:FACTORY" in r.stderr

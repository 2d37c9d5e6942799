"""``guardjit.advise`` and ``python -m guardjit advise`` (docs/advise.md): every
report field, the command line, and the verdicts on unsafe options checked
by hand against eager and plain torch."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
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

from advise_cases import Block

GAIN = 1.5  # a global the model reads: skip_guard_on_globals_unsafe drops its guard

TINY = Settings(rounds=2, profile_calls=4, target_ms=0.1, depth=2, groups=1, changes=6)


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
        assert side["pregraph_us"] >= 0, name
    for name in ("guardjit", "guardjit+use_recursive_dict_tags_for_guards",
                 "guardjit+install_free_tensors+skip_guard_on_all_nn_modules_unsafe"):
        assert r["sides"][name]["lookup_us"] > 0 and r["sides"][name]["check_us"] > 0, name
    assert r["sides"]["guardjit+skip_guard_eval_unsafe"]["check_us"] is None
    # The graph's input (x) is rebuilt before the graph: Dynamo's pre-graph event.
    assert r["sides"]["torch"]["pregraph_us"] > 0
    for name, note in r["guardjit_vs_options"].items():
        assert name in SIDES and note["guardjit_with_option_us"] is not None, name
    units = r["guards"]["units"]
    assert units
    for u in units:
        assert set(UNIT_FIELDS) <= set(u)
        assert sum(g["guards"] for g in u["groups"]) == u["guards"]
        for g in u["groups"]:
            assert set(GROUP_FIELDS) <= set(g)
    measured = [g for u in units for g in u["groups"] if g["cost_us"] is not None]
    assert len(measured) == 1 and measured[0]["group"] == r["guards"]["measured_groups"][0]
    assert measured[0]["dynamo_cost_us"] is not None
    assert set(measured[0]["python_frames"]) == {"dynamo", "guardjit"}
    assert isinstance(measured[0]["accessor_reads"], dict)
    hows = [g["guardjit"]["how"] for u in units for g in u["groups"]]
    assert any("skipped while unchanged" in h or h == "native" for h in hows), hows
    assert set(r["guards"]["python_frames"]) >= {"python_frames_dynamo",
                                                 "python_frames_guardjit"}
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
    # The stance, alone on the code as a user runs it, serves the stale graph.
    stance = opts["skip_guard_eval_unsafe"]
    assert "self.scale" in {b["source"] for b in stance["bites"]}, stance["verdict"]
    assert "serves a stale graph when" in stance["verdict"]
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
        # The stance: warmed without it, then self.scale changes under it.
        torch._dynamo.reset()
        st = torch.compile(model, backend=SideBackend("eager", "stance"))
        st(x), st(w)
        model.scale = 3.0
        try:
            with torch.compiler.set_stance("default", skip_guard_eval_unsafe=True):
                assert not torch.equal(st(x), model(x))  # the stale graph
        finally:
            model.scale = 2.0
        torch._dynamo.reset()


class Reshaping(nn.Module):
    """Bakes the batch size into a view: an option dropping the shape guards
    serves batch 2's graph to batch 3 and raises."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        return self.lin(x).view(b, t, 2, c // 2).sum(-1)


def test_a_warmup_input_an_option_fails_on_is_its_bite():
    torch.manual_seed(0)
    model = Reshaping().eval()
    r = guardjit.advise(model, (torch.randn(2, 4, 8),), [(torch.randn(3, 4, 8),)],
                        settings=TINY)
    skip_all = r["unsafe"]["options"]["skip_all_guards_unsafe"]
    assert not skip_all["safe"] and skip_all["verdict"].startswith("fails when warm-up input 0")
    assert r["unsafe"]["options"]["keep_tensor_guards_unsafe"]["safe"]
    assert "warmup_errors" in r["sides"]["install_free_tensors+skip_guard_on_all_nn_modules_unsafe"] \
        or r["sides"]["install_free_tensors+skip_guard_on_all_nn_modules_unsafe"]["status"] == "ok"
    # By hand: plain torch recompiles, skip_all_guards_unsafe raises.
    x, w = torch.randn(2, 4, 8), torch.randn(3, 4, 8)
    with torch.no_grad():
        torch._dynamo.reset()
        plain = torch.compile(model, backend=SideBackend("eager", "plain"))
        unsafe = torch.compile(model, backend=SideBackend("eager", "all"), options={
            "guard_filter_fn": torch.compiler.skip_all_guards_unsafe})
        plain(x), unsafe(x)
        assert torch.equal(plain(w), model(w))
        try:
            unsafe(w)
            raise AssertionError("skip_all_guards_unsafe served batch 3")
        except RuntimeError as e:
            assert "invalid for input of size" in str(e)
        torch._dynamo.reset()


class Dropping(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(16, 16)
        self.drop = nn.Dropout(0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.lin(x))


def test_train_with_dropout_is_judged_from_the_same_random_state():
    """train() with dropout draws random numbers: every call of step 3 starts
    from the same seed, so eager and plain torch agree and the nn-module
    filters' stale eval graph shows; the caller's random state is kept."""
    torch.manual_seed(0)
    model = Dropping().eval()
    x = torch.randn(4, 16)
    before = torch.get_rng_state()
    r = guardjit.advise(model, (x,), settings=TINY)
    assert torch.equal(torch.get_rng_state(), before)
    assert not model.training
    [train] = [c for c in r["unsafe"]["changes"] if c["change"] == "self.train()"]
    assert train["judged"] and train["sides"]["torch"]["same_as_eager"]
    inbuilt = r["unsafe"]["options"]["skip_guard_on_inbuilt_nn_modules_unsafe"]
    assert "self.training" in {b["source"] for b in inbuilt["bites"]}, inbuilt["verdict"]
    assert r["unsafe"]["options"]["guardjit"]["safe"]


class Writing(nn.Module):
    """Train-mode BatchNorm (its statistics change on every call) and an
    input written in place."""

    def __init__(self) -> None:
        super().__init__()
        self.bn = nn.BatchNorm1d(4)
        self.k = 2.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x.add_(1.0)
        return self.bn(x) * self.k


def test_advise_leaves_the_callers_objects_as_they_were():
    torch.manual_seed(0)
    model = Writing().train()
    x = torch.randn(8, 4)
    x0 = x.clone()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    r = guardjit.advise(model, (x,), settings=TINY)
    assert torch.equal(x, x0)
    after = model.state_dict()
    assert all(torch.equal(after[k], v) for k, v in state.items())
    assert model.training and model.k == 2.0
    # The in-place write no longer makes plain torch differ from eager: k is judged.
    [k] = [c for c in r["unsafe"]["changes"] if c["source"] == "self.k"]
    assert k["judged"]
    assert "self.k" in {b["source"] for b in
                        r["unsafe"]["options"]["skip_guard_on_all_nn_modules_unsafe"]["bites"]}


def test_a_bound_method_gets_a_code_object_of_its_own():
    from guardjit.advise_measure import own_code

    model = _model()
    bound = own_code(model.forward)
    assert bound.__self__ is model
    assert bound.__func__.__code__ is not Scaled.forward.__code__
    x = torch.randn(2, 4)
    with torch.no_grad():
        assert torch.equal(bound(x), model(x))


def test_cli_json_to_stdout_is_the_json_alone_and_bad_values_are_refused():
    r = subprocess.run([sys.executable, "-m", "guardjit", "advise", "guardjit.models:two_input_mlp",
                        "--quick", "--json", "-", "--no-progress", "--groups", "1",
                        "--changes", "2", "--rounds", "1"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads(r.stdout)["schema"] == advise_mod.SCHEMA
    for flag, value in (("--rounds", "0"), ("--groups", "-1"), ("--changes", "-1")):
        bad = subprocess.run([sys.executable, "-m", "guardjit", "advise",
                              "guardjit.models:two_input_mlp", flag, value],
                             capture_output=True, text=True, timeout=120)
        assert bad.returncode == 2 and "must be at least" in bad.stderr, (flag, bad.stderr)


class Based(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + 1


class Derived(Based):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor, *, k: int = 2) -> torch.Tensor:
        return super().forward(self.lin(x)) * k


def test_each_side_has_code_of_its_own():
    """own_code: every side's top frame runs its own code object, so no side's
    cache entries meet another's (guardjit's differentiating sets would make
    plain torch's entries opaque: full roots under the stance)."""
    from guardjit import stance
    from guardjit.advise_measure import Side, own_code
    from guardjit.bench.corpus import BenchCase

    torch.manual_seed(0)
    model = Derived().eval()
    x = torch.randn(2, 4)
    twin = own_code(model)
    assert twin is not model and twin.lin is model.lin
    assert twin.forward.__func__.__code__ is not Derived.forward.__code__
    with torch.no_grad():
        assert torch.equal(twin(x, k=3), model(x, k=3))  # super() and kwdefaults work
        f = own_code(_model().forward)  # a bound method: returned as is
        assert f.__self__ is not None
        case = BenchCase("derived", model, lambda: (x,))
        torch._dynamo.reset()
        sides = [Side(n, case, "eager") for n in ("torch", "skip_guard_eval_unsafe", "guardjit",
                                                   "guardjit+skip_guard_eval_unsafe")]
        for s in sides:
            s.warm([])
            assert torch.equal(s.call()(), model(x))
        codes = {s.name: s.case.model.forward.__func__.__code__ for s in sides}
        assert len({id(c) for c in codes.values()}) == len(sides)
        from torch._C._dynamo.eval_frame import _debug_get_cache_entry_list
        for name in ("torch", "skip_guard_eval_unsafe"):
            [entry] = _debug_get_cache_entry_list(codes[name])
            assert not isinstance(entry.guard_manager, stance.OpaqueManagerWrapper), name
        torch._dynamo.reset()


def test_report_is_a_tlparse_artifact(tmp_path):
    """Under TORCH_TRACE the report goes out as the ``guardjit_advise`` artifact."""
    trace = tmp_path / "trace"
    script = (
        "import torch, guardjit, guardjit.advise\n"
        "from guardjit.advise import Settings\n"
        "m = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU()).eval()\n"
        "s = Settings(rounds=1, profile_calls=2, target_ms=0.05, groups=1, changes=2)\n"
        "r = guardjit.advise(m, (torch.randn(2, 4),), settings=s)\n"
        "print(r['schema'])\n")
    env = dict(os.environ, TORCH_TRACE=str(trace))
    env.pop("GUARDJIT", None)
    r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    [log] = list(trace.glob("*.log"))
    lines = log.read_text().splitlines()
    at = [i for i, line in enumerate(lines) if '"guardjit_advise"' in line]
    assert len(at) == 1, "no guardjit_advise artifact in the TORCH_TRACE log"
    payload = []
    for p in lines[at[0] + 1:]:
        if not p.startswith("\t"):
            break
        payload.append(p[1:])
    report = json.loads("\n".join(payload))
    assert report["schema"] == advise_mod.SCHEMA and set(REPORT_FIELDS) <= set(report)
    # tlparse (installed by scripts/setup.sh) lists it.
    here = pathlib.Path(sys.executable).parent / "tlparse"
    tlparse = str(here) if here.exists() else shutil.which("tlparse")
    assert tlparse, "tlparse is not installed (scripts/setup.sh installs it from PyPI)"
    out = tmp_path / "tl_out"
    subprocess.run([tlparse, str(log), "-o", str(out), "--no-browser"], check=True,
                   timeout=300, capture_output=True)
    files = [p.name for p in out.rglob("*") if p.is_file()]
    assert any(n.startswith("guardjit_advise") for n in files), files


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

"""``python -m guardjit advise -- script.py ARGS`` (docs/advise.md, "A script"):
the script runs as it does alone, every compile it makes is observed with
the inputs of its calls, and advise reports on each compiled target."""

from __future__ import annotations

import copy
import json
import os
import pathlib
import pickle
import subprocess
import sys
import textwrap
from unittest import mock

import pytest
import torch
from torch import nn

import guardjit
import guardjit.advise
from guardjit import advise_script
from guardjit.advise import REPORT_FIELDS, SIDE_FIELDS, Settings
from guardjit.advise_script import SCHEMA, TARGET_FIELDS, observe

PYTHON_DIR = str(pathlib.Path(guardjit.__file__).resolve().parent.parent)
QUICK = ["--quick", "--no-progress", "--groups", "1", "--changes", "3", "--rounds", "2"]

SCRIPT = textwrap.dedent("""
    import os
    import sys
    import torch
    from torch import nn

    from helper import SCALE  # the script's folder is on sys.path, as for python script.py


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)
            self.act = True

        def forward(self, x):
            y = self.lin(x)
            return torch.relu(y) if self.act else y


    class Head(nn.Module):
        def forward(self, x):
            return x.sum(-1)


    @torch.compile(backend="eager")
    def post(x, bias=0.5):
        return torch.tanh(x) * SCALE + bias


    def main():
        os.chdir(os.path.dirname(__file__))  # advise's --json path stays the caller's
        torch.manual_seed(0)
        net = Net().eval()
        cnet = torch.compile(net, backend="eager", dynamic=False)
        head = Head()
        head.compile(backend="eager")
        with torch.no_grad():
            for batch in (2, 3, 2, 3):
                x = torch.full((batch, 4), 0.1)
                out = post(cnet(x))
                x.add_(100.0)  # in place, after the call
                print(f"batch {batch}: {out.sum().item():.6f}")
            print(f"head: {head(out).tolist()}")
        print("argv:", sys.argv[1:])
        raise SystemExit(0)


    if __name__ == "__main__":
        main()
""")


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [PYTHON_DIR, env.get("PYTHONPATH")]))
    env.pop("GUARDJIT", None)
    return env


def _advise(*args: str, cwd: pathlib.Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "guardjit", "advise", *args],
                          capture_output=True, text=True, env=_env(), cwd=cwd, timeout=600)


def test_script_runs_unchanged_and_each_target_is_advised(tmp_path):
    # Run from another folder: the script imports a module beside it.
    (tmp_path / "proj").mkdir()
    script = tmp_path / "proj" / "train.py"
    script.write_text(SCRIPT)
    (tmp_path / "proj" / "helper.py").write_text("SCALE = 2.0\n")
    alone = subprocess.run([sys.executable, str(script), "a", "b"], capture_output=True,
                           text=True, env=_env(), cwd=tmp_path, timeout=300)
    assert alone.returncode == 0, alone.stderr[-3000:]
    assert "argv: ['a', 'b']" in alone.stdout

    out = tmp_path / "advise.json"
    r = _advise(*QUICK, "--targets", "2", "--json", "advise.json", "--html", "page.html",
                "--", str(script), "a", "b", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    # The script's own output first, unchanged; then the tables.
    assert r.stdout.startswith(alone.stdout), (r.stdout[:2000], alone.stdout)
    tail = r.stdout[len(alone.stdout):]
    assert tail.count("1. Per call") == 2 and tail.count("3. Which unsafe switch") == 2
    assert "not advised: Head (calls: 1): beyond --targets 2" in tail
    # --html: one page per advised target.
    assert sorted(p.name for p in tmp_path.glob("page*")) == ["page-Net.html", "page-post.html"]
    assert "<html" in (tmp_path / "page-post.html").read_text()

    data = json.loads(out.read_text())
    assert data["schema"] == SCHEMA
    assert data["script"] == str(script) and data["argv"] == ["a", "b"]
    assert data["guardjit_installed"] is False
    targets = {t["target"]: t for t in data["targets"]}
    assert [t["target"] for t in data["targets"]] == ["post", "Net", "Head"]  # most calls first
    for t in data["targets"]:
        assert set(TARGET_FIELDS) <= set(t)
    post, net, head = targets["post"], targets["Net"], targets["Head"]
    assert (post["calls"], net["calls"], head["calls"]) == (4, 4, 1)
    assert (post["kind"], net["kind"], head["kind"]) == ("function", "module", "module")
    assert (post["via"], net["via"], head["via"]) == ("torch.compile", "torch.compile",
                                                      "nn.Module.compile")
    # Only the arguments the script gave (the decorator form passes all of them).
    assert post["compile_kwargs"] == {"backend": "eager"}
    assert net["compile_kwargs"] == {"backend": "eager", "dynamic": False}
    # Batches 2, 3, 2, 3: one example and one warm-up of another shape.
    assert post["warmup_inputs"] == net["warmup_inputs"] == 1
    assert head["report"] is None and "beyond --targets 2" in head["skipped"]
    for t in (post, net):
        rep = t["report"]
        assert set(REPORT_FIELDS) <= set(rep) and rep["model"] == t["target"]
        assert rep["warmup_inputs"] == 1
        for name, side in rep["sides"].items():
            assert side["status"] == "ok", (name, side)
            assert set(SIDE_FIELDS) <= set(side)
        assert rep["guards"]["units"]
    # The function has no module state: what was tried is the global it
    # reads, grad mode and the warm-up input, and the global bites the
    # filter that drops it.
    tried = {c["source"] for c in post["report"]["unsafe"]["changes"]}
    assert {"G['SCALE']", "<inputs>"} <= tried, tried
    glob = post["report"]["unsafe"]["options"]["skip_guard_on_globals_unsafe"]
    assert not glob["safe"] and [b["source"] for b in glob["bites"]] == ["G['SCALE']"]
    assert post["report"]["unsafe"]["options"]["guardjit"]["safe"]
    assert "grad mode, the warm-up inputs): G['SCALE'] = 5.0" in tail
    # The module's own attribute, as for a factory.
    nn_all = net["report"]["unsafe"]["options"]["skip_guard_on_all_nn_modules_unsafe"]
    assert "self.act" in {b["source"] for b in nn_all["bites"]}
    # --from-json renders the script's report again, one page per advised target.
    again = _advise("--from-json", "advise.json", "--html", "again.html", cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stdout.count("1. Per call") == 2
    assert sorted(p.name for p in tmp_path.glob("again*")) == ["again-Net.html",
                                                              "again-post.html"]


def test_script_that_raises_is_a_clear_error(tmp_path):
    script = tmp_path / "broken.py"
    script.write_text("import torch\n"
                      "f = torch.compile(lambda x: x + 1, backend='eager')\n"
                      "f(torch.ones(2))\n"
                      "raise ValueError('no data here')\n")
    r = _advise("--no-progress", "--", str(script), cwd=tmp_path)
    assert r.returncode == 1, r.stderr[-3000:]
    assert "Traceback" in r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("python -m guardjit advise: error:")
    assert f"{script} raised ValueError: no data here" in last

    script.write_text("import sys\nsys.exit(3)\n")
    r = _advise("--no-progress", "--", str(script), cwd=tmp_path)
    assert r.returncode == 1 and f"{script} exited with code 3" in r.stderr


def test_script_without_compile_exits_2(tmp_path):
    script = tmp_path / "plain.py"
    script.write_text("import torch\nprint(torch.ones(2).sum().item())\n")
    r = _advise("--no-progress", "--", str(script), cwd=tmp_path)
    assert r.returncode == 2
    assert r.stdout == "2.0\n"
    assert f"{script} compiled nothing" in r.stderr

    script.write_text("import torch\nf = torch.compile(lambda x: x, backend='eager')\n")
    r = _advise("--no-progress", "--", str(script), cwd=tmp_path)
    assert r.returncode == 2 and "never called the result" in r.stderr


def test_command_line_forms(tmp_path):
    r = _advise("--help", cwd=tmp_path)
    assert r.returncode == 0
    assert "advise [options] MODULE:FACTORY" in r.stdout
    assert "advise [options] -- script.py [ARGS ...]" in r.stdout
    r = _advise("--quick", cwd=tmp_path)
    assert r.returncode == 2 and "-- script.py ARGS (one of them)" in r.stderr
    r = _advise("--no-progress", "--", str(tmp_path / "missing.py"), cwd=tmp_path)
    assert r.returncode == 2 and "no such script" in r.stderr


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
        return self.lin(x) * scale


def test_observe_keeps_inputs_and_returns_torchs_results():
    torch.manual_seed(0)
    net = Net().eval()
    other = Net().eval()

    def fn(x, y, *, k=1):
        return x * y + k

    originals = torch.compile, guardjit.compile
    with observe(warmups=2) as obs:
        assert torch.compile is not originals[0]
        cnet = torch.compile(net, backend="eager")
        gnet = guardjit.compile(other, backend="eager")
        cfn = torch.compile(fn, backend="eager")
        with torch.no_grad():
            x = torch.ones(2, 3)
            assert torch.equal(cnet(x), net(x))
            x.add_(5.0)  # later in-place changes do not reach the kept inputs
            assert torch.equal(cnet(torch.ones(4, 3), scale=2.0), net(torch.ones(4, 3), 2.0))
            cnet(torch.ones(2, 3, dtype=torch.float64).float())  # same key as the first
            cnet(torch.ones(5, 3))
            cnet(torch.ones(6, 3))  # beyond warmups=2: counted, not kept
            assert torch.equal(gnet(x), other(x))
            assert torch.equal(cfn(x, x, k=2), fn(x, x, k=2))
            cfn(torch.ones(1), torch.ones(1), k=3)  # its keyword input differs
            # torch's own object: it deep-copies and pickles as torch's does.
            assert type(cnet).__name__ == "OptimizedModule"
            assert torch.equal(copy.deepcopy(cnet)(x), net(x))
            assert torch.equal(pickle.loads(pickle.dumps(cnet))(x), net(x))
    assert (torch.compile, guardjit.compile) == originals
    t_net, t_other, t_fn = obs.targets
    assert t_net.target is net and t_net.calls == 5
    assert torch.equal(t_net.example[0][0], torch.ones(2, 3)) and t_net.example[1] == {}
    # scale=2.0 bound to its position; the (2, 3) float call again is no warm-up.
    assert [tuple(a[0].shape) for a in t_net.warmups] == [(4, 3), (5, 3)]
    assert t_net.warmups[0][1] == 2.0
    assert t_other.target is other and t_other.via == "guardjit.compile" and t_other.calls == 1
    assert t_fn.kind == "function" and t_fn.calls == 2 and t_fn.example[1] == {"k": 2}
    assert t_fn.warmups == [] and sum(t_fn.skipped.values()) == 1
    # The compiled module still records after observe() (the script's
    # results are torch's objects, kept as they are).
    with torch.no_grad():
        assert torch.equal(cnet(x), net(x))
    assert t_net.calls == 6


def test_advise_on_module_compile_runs_the_module_eagerly():
    """nn.Module.compile makes the module's own calls compiled; advise's eager
    reference must run eagerly, and the module gets its compiled call back."""
    calls = []

    class Counting(nn.Module):
        def forward(self, x):
            calls.append(torch.compiler.is_compiling())
            return x + 1

    m = Counting()
    with observe() as obs:
        m.compile(backend="eager")
        m(torch.ones(2))
    (t,) = obs.targets
    assert t.target is m and t.via == "nn.Module.compile"
    compiled_call = m._compiled_call_impl
    with advise_script._unset_compiled_call(t):
        calls.clear()
        m(torch.ones(2))
        assert calls == [False]
    assert m._compiled_call_impl is compiled_call


def test_a_call_whose_inputs_cannot_be_kept_still_runs():
    def fn(x):
        return x * 2

    with observe() as obs:
        cfn = torch.compile(fn, backend="eager")
        with mock.patch.object(advise_script, "_clone", side_effect=RuntimeError("no copy")):
            assert torch.equal(cfn(torch.ones(2)), torch.full((2,), 2.0))
        assert torch.equal(cfn(torch.ones(2)), torch.full((2,), 2.0))
    (t,) = obs.targets
    assert t.calls == 2 and dict(t.skipped) == {"inputs not kept: RuntimeError: no copy": 1}
    assert torch.equal(t.example[0][0], torch.ones(2))  # the next call is the example


def test_advise_on_a_function_dynamo_skips_is_a_clear_error():
    tiny = Settings(rounds=2, profile_calls=4, target_ms=0.1, depth=2, groups=1, changes=2)
    with pytest.raises(ValueError, match="no side built a compile unit"):
        guardjit.advise(lambda n: n * 2, (3,), name="numbers", settings=tiny)


def test_advise_under_install_measures_plain_torch_as_plain_torch():
    """GUARDJIT=1 (guardjit.install) routes every compile through guardjit;
    advise's plain-torch sides must stay torch's: guardjit converts as many
    units during advise as without install, and install stays on after."""
    from guardjit import plugin

    tiny = Settings(rounds=2, profile_calls=4, target_ms=0.1, depth=2, groups=1, changes=1)

    def fn(x):
        return torch.sin(x) + 1

    def converted() -> int:
        before = plugin.stats()["units_seen"]
        guardjit.advise(fn, (torch.ones(3),), name="fn", settings=tiny)
        return plugin.stats()["units_seen"] - before

    alone = converted()
    assert guardjit.install()
    try:
        assert converted() == alone > 0
        assert plugin.config.route_all
    finally:
        guardjit.uninstall()

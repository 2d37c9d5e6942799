"""``python -m guardjit export --serve``: the serve bundle (guardjit-serve/1)
of AOTInductor packages with their portable guard sets and select sets.

One bundle of the tiny model (float32 batches 1 and 4, bfloat16 batch 1) is
built once for the module: each AOTInductor compile takes seconds.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import sys
import sysconfig

import pytest
import torch

import guardjit
from guardjit import _core, export, serving, stable_text

GUARD_IR_OPT = os.path.join(sysconfig.get_path("scripts"), "guard-ir-opt")
HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    case = serving.tiny(batches=(1, 4), bf16_batch=1)
    out = str(tmp_path_factory.mktemp("bundle"))
    b = serving.build_bundle(case.model, case.buckets, out, name=case.name, progress=False)
    b.model = case.model
    return b


def _read(bundle, name):
    with open(os.path.join(bundle.out_dir, name), encoding="utf-8") as f:
        return f.read()


def _examples(bundle):
    """Each artifact's example call as frame locals of forward(self, x)."""
    out = {}
    for a in bundle.manifest["artifacts"]:
        flat = torch.load(os.path.join(bundle.out_dir, a["example"]))
        assert len(flat) == len(bundle.manifest["inputs"])
        out[a["name"]] = flat
    return out


def _f_locals(bundle, flat):
    d = {"self": bundle.model}
    for spec, t in zip(bundle.manifest["inputs"], flat):
        m = re.fullmatch(r"L\['(\w+)'\]", spec["source"])
        assert m, spec
        d[m.group(1)] = t
    return d


def _check(ir):
    return _core.make_guard(_core.bind(ir), None)


def test_manifest(bundle):
    m = bundle.manifest
    assert m["format"] == "guardjit-serve/1"
    assert m["torch"] == torch.__version__
    assert m["inputs"] == [{"name": "x", "source": "L['x']", "kind": "tensor"}]
    names = [a["name"] for a in m["artifacts"]]
    assert names == ["b1_float32", "b4_float32", "b1_bfloat16"]
    assert m["select"]["file"] == "select.gir"
    assert m["select"]["sets"] == {n: n for n in names}
    assert m["select"]["policy"] == "minimal"
    select_text = _read(bundle, "select.gir")
    assert m["select"]["check_inputs"] == {n: [0] for n in names}
    for a in m["artifacts"]:
        assert a["check_inputs"] == [0]
        for key in ("package", "guards", "example", "expected"):
            assert os.path.isfile(os.path.join(bundle.out_dir, a[key])), a[key]
        text = _read(bundle, a["guards"])
        assert text.startswith(f'gir torch="{torch.__version__}" guardjit="{guardjit.__version__}"')
        assert f'guard_set "{a["set"]}" {{' in text
        assert f'guard_set "{m["select"]["sets"][a["name"]]}" {{' in select_text
        c = a["guard_counts"]
        # guardjit's count is the guards in the file.
        assert c["guardjit_portable"] == len(re.findall(r"^  guard ", text, re.M))
        assert c["guardjit_portable_by_kind"] == {
            "TENSOR_MATCH": 1, "DIMENSION_DYNAMIC_MARKING_GUARD": 1, "GLOBAL_STATE": 1}
        # torch's: all of them, keep_portable_guards_unsafe's, the ones kept.
        assert c["torch_full"] > c["torch_keep_portable"] > c["torch_kept"] > 0
        # Linear's weight and bias are parameters, `scale` a buffer: constants
        # of the package, dropped.
        assert a["dropped"] == {"buffer": 1, "parameter": 2}
        assert sum(a["dropped"].values()) == c["torch_keep_portable"] - c["torch_kept"]
        assert 1 <= c["select"] <= c["guardjit_portable"]
        # The dtype or the batch size tells every pair apart: one check each.
        assert c["select"] == 1 and a["select_stats"]["exact"]
    # The exporting process's global state is the one the sets guard.
    state = json.loads(_read(bundle, "global_state.json"))
    assert state["grad_mode"] is False  # exported under no_grad, as served
    for a in m["artifacts"]:
        g = re.search(r'guard global_state .*? str="((?:[^"\\]|\\.)*)"', _read(bundle, a["guards"]))
        assert json.loads(g.group(1).encode().decode("unicode_escape")) == state


def test_files_are_the_checked_sets(bundle):
    for a, ir, sel in zip(bundle.manifest["artifacts"], bundle.sets, bundle.select):
        text = _read(bundle, a["guards"])
        assert text.split("\n", 2)[2] == stable_text.normalize(ir.print())
        assert stable_text.normalize(sel.print()) in _read(bundle, "select.gir")


def test_gir_files_parse_and_are_portable(bundle):
    """guard-ir-opt reads every file back byte for byte, and torch's portable
    filter (which PortableSet::load runs) removes nothing: every guard left
    is one the portable checker evaluates."""
    files = [a["guards"] for a in bundle.manifest["artifacts"]] + ["select.gir"]
    for name in files:
        path = os.path.join(bundle.out_dir, name)
        text = _read(bundle, name)
        for cmd in ([GUARD_IR_OPT, path],
                    [GUARD_IR_OPT, "-passes=keep_portable_guards_unsafe", path]):
            r = subprocess.run(cmd, capture_output=True, text=True)
            assert r.returncode == 0, r.stderr
            assert r.stdout == text, cmd
        kinds = set(re.findall(r"^  guard (\S+)", text, re.M))
        assert kinds <= {"tensor_match", "dimension_marking", "global_state"}, kinds


def test_interpreter_passes_own_examples_and_fails_the_others(bundle):
    """The same sets in memory, checked by guardjit's interpreter on live
    frame locals (what the plugin checks)."""
    examples = _examples(bundle)
    with torch.no_grad():
        for a, ir in zip(bundle.manifest["artifacts"], bundle.sets):
            check = _check(ir)
            for name, flat in examples.items():
                assert check(_f_locals(bundle, flat)) == (name == a["name"]), (a["name"], name)
            # Grad mode is part of the recorded global state.
            with torch.enable_grad():
                assert not check(_f_locals(bundle, examples[a["name"]]))


def _portable(bundle):
    """(full sets, select sets, global state JSON) through the C++ portable
    checker (PortableSet::load, keep_portable_guards_unsafe first)."""
    m = bundle.manifest
    select = serving.load_portable(os.path.join(bundle.out_dir, m["select"]["file"]))
    full, sel = {}, {}
    for a in m["artifacts"]:
        full[a["name"]] = serving.load_portable(os.path.join(bundle.out_dir, a["guards"]))[a["set"]]
        sel[a["name"]] = select[m["select"]["sets"][a["name"]]]
    return full, sel, _read(bundle, m["global_state"])


def test_portable_checker_loads_every_set_with_the_manifest_inputs(bundle):
    full, sel, _ = _portable(bundle)
    sources = [(i["source"], i["kind"]) for i in bundle.manifest["inputs"]]
    for a in bundle.manifest["artifacts"]:
        assert full[a["name"]].inputs == sources
        assert full[a["name"]].num_guards == a["guard_counts"]["guardjit_portable"]
        assert sel[a["name"]].num_guards == a["guard_counts"]["select"]
        assert sel[a["name"]].inputs == sources


def test_portable_checker_passes_own_examples_and_fails_the_others(bundle):
    full, sel, state = _portable(bundle)
    examples = _examples(bundle)
    grad_on = json.dumps(dict(json.loads(state), grad_mode=True))
    for name, check in full.items():
        for other, flat in examples.items():
            ins = [serving.portable_input(t) for t in flat]
            ok, why = check.check(ins, state)
            assert ok == (name == other), (name, other, why)
            if not ok:
                assert why.startswith("TENSOR_MATCH on L['x']: "), why
            # Without TensorExt the check is weaker, never different here.
            assert check.check([serving.portable_input(t, ext=False) for t in flat],
                               state)[0] == ok
        # The global state is checked: another grad mode fails.
        ok, why = check.check([serving.portable_input(t) for t in examples[name]], grad_on)
        assert not ok and why.startswith("GLOBAL_STATE"), why
    # A request that does not match the set's inputs is misuse, not a miss.
    with pytest.raises(ValueError, match="takes 1 input"):
        next(iter(full.values())).check([], state)


def test_portable_select_sets_pick_exactly_the_right_artifact(bundle):
    full, sel, state = _portable(bundle)
    names = list(full)
    requests = {n: [serving.portable_input(t) for t in flat]
                for n, flat in _examples(bundle).items()}
    unseen = {n: [serving.portable_input(t) for t in flat] for n, flat in (
        ("b2_float32", [torch.randn(2, 16)]),
        ("b1_float64", [torch.randn(1, 16, dtype=torch.float64)]),
        ("b4_transposed", [torch.randn(16, 4).t()]),
        ("b1_requires_grad", [torch.randn(1, 16, requires_grad=True)]))}
    for order in itertools.permutations(names):
        for name, ins in requests.items():
            picked = next(n for n in order if sel[n].check(ins, state)[0])
            assert picked == name and full[picked].check(ins, state)[0]
        for name, ins in unseen.items():
            assert not any(full[n].check(ins, state)[0] for n in names), name
            picked = next((n for n in order if sel[n].check(ins, state)[0]), None)
            assert picked is None or not full[picked].check(ins, state)[0]


def test_interpreter_select_sets_pick_exactly_the_right_artifact(bundle):
    examples = _examples(bundle)
    names = [a["name"] for a in bundle.manifest["artifacts"]]
    full = dict(zip(names, map(_check, bundle.sets)))
    select = dict(zip(names, map(_check, bundle.select)))
    # A select set is a subset of its artifact's portable set.
    for ir, sel in zip(bundle.sets, bundle.select):
        lines = set(ir.print().splitlines())
        assert all(line in lines for line in sel.print().splitlines() if "guard " in line)
    unseen = {"b2_float32": [torch.randn(2, 16)],
              "b1_float64": [torch.randn(1, 16, dtype=torch.float64)],
              "b1_transposed": [torch.randn(16, 1).t()]}
    with torch.no_grad():
        for order in itertools.permutations(names):
            for name, flat in examples.items():
                f_locals = _f_locals(bundle, flat)
                picked = next(n for n in order if select[n](f_locals))
                assert picked == name, (order, name)
                assert full[picked](f_locals)
            # Inputs no artifact was built for: whatever the select sets
            # pick, the chosen artifact's full set rejects them.
            for name, flat in unseen.items():
                f_locals = _f_locals(bundle, flat)
                assert not any(full[n](f_locals) for n in names), name
                picked = next((n for n in order if select[n](f_locals)), None)
                assert picked is None or not full[picked](f_locals)


def test_packages_match_eager_in_the_manifest_order(bundle):
    from torch._inductor import aoti_load_package

    for a in bundle.manifest["artifacts"]:
        runner = aoti_load_package(os.path.join(bundle.out_dir, a["package"]))
        flat = torch.load(os.path.join(bundle.out_dir, a["example"]))
        expected = torch.load(os.path.join(bundle.out_dir, a["expected"]))
        with torch.no_grad():
            got = runner(*flat)
            eager = bundle.model(*flat)
        torch.testing.assert_close(got, eager)
        torch.testing.assert_close([got], expected)
        # The raw copies hold the same bytes.
        with open(os.path.join(bundle.out_dir, a["example_raw"]["file"]), "rb") as f:
            raw = f.read()
        (t,) = a["example_raw"]["tensors"]
        assert t["sizes"] == list(flat[0].shape) and t["dtype"] == str(flat[0].dtype)[6:]
        assert raw[t["offset"]:t["offset"] + t["nbytes"]] == \
            flat[0].contiguous().view(torch.uint8).numpy().tobytes()


# --- several inputs, keyword arguments, the command line ---------------------

class TwoInputs(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)

    def forward(self, x, ys, *, bias):
        return self.fc(x) + ys[0] * ys[1] + bias


def two_inputs():
    torch.manual_seed(0)
    return serving.ServeCase("two_inputs", TwoInputs().eval(),
                             [serving.Bucket((torch.randn(2, 8), [torch.randn(2, 8),
                                                                  torch.randn(2, 8)]),
                                             {"bias": torch.randn(8)})])


def test_input_order_and_sources_follow_the_signature():
    case = two_inputs()
    b = case.buckets[0]
    ep = torch.export.export(case.model, b.args, b.kwargs)
    specs = serving.input_specs(case.model, ep, b.args, b.kwargs)
    assert [s.source for s in specs] == ["L['x']", "L['ys'][0]", "L['ys'][1]", "L['bias']"]


def test_command_line_bundle_with_derived_buckets(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [HERE] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    r = subprocess.run([sys.executable, "-m", "guardjit", "export", "--serve",
                        "test_export_serve:two_inputs", "--bucket", "batch=2",
                        "--bucket", "batch=3,name=three", "--out", str(tmp_path),
                        "--json", "-"], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    assert "aoti_compile_and_package" in r.stderr  # progress
    summary = json.loads(r.stdout)
    assert [a["name"] for a in summary["artifacts"]] == ["b2_float32", "three"]
    with open(tmp_path / "manifest.json") as f:
        m = json.load(f)
    assert [i["source"] for i in m["inputs"]] == ["L['x']", "L['ys'][0]", "L['ys'][1]",
                                                  "L['bias']"]
    for a in m["artifacts"]:
        text = (tmp_path / a["guards"]).read_text()
        # Every input is guarded; the aliasing guard covers the inputs only.
        for s in ("L['x']", "L['ys'][0]", "L['ys'][1]", "L['bias']"):
            assert re.search(rf'guard tensor_match .*source="{re.escape(s)}"', text), s
        assert "guard no_tensor_aliasing" in text
        assert "_parameters" not in text
        assert a["dropped"] == {"parameter": 2}
        # The checker takes its inputs in guard order: check_inputs maps it.
        (loaded,) = serving.load_portable(str(tmp_path / a["guards"])).values()
        assert [m["inputs"][k]["source"] for k in a["check_inputs"]] == \
            [src for src, _ in loaded.inputs]
        assert sorted(a["check_inputs"]) == [0, 1, 2, 3]
        select = serving.load_portable(str(tmp_path / "select.gir"))[a["name"]]
        assert [m["inputs"][k]["source"] for k in m["select"]["check_inputs"][a["name"]]] == \
            [src for src, _ in select.inputs]
    # Inputs with the batch dim are resized; bias (8,) is not.
    three = (tmp_path / "three.gir").read_text()
    assert "sizes=[3, 8]" in three and "sizes=[8]" in three


def test_derived_bucket_spec():
    x = torch.arange(4.0).reshape(2, 2)
    b = export._derive_bucket((x, 7), {"ids": torch.tensor([[5, 6], [7, 8]]),
                                       "w": torch.ones(5)},
                              "batch=3,dtype=bfloat16,name=n")
    assert b.kwargs["w"].shape == (5,) and b.kwargs["w"].dtype == torch.bfloat16
    assert b.name == "n" and b.args[1] == 7
    assert b.args[0].dtype == torch.bfloat16 and b.args[0].shape == (3, 2)
    assert b.kwargs["ids"].dtype == torch.int64  # only floating inputs change dtype
    assert b.kwargs["ids"].tolist() == [[5, 6], [7, 8], [5, 6]]
    with pytest.raises(ValueError, match="expected batch=N"):
        export._derive_bucket((x,), {}, "size=3")


def test_bad_factory_is_a_clear_error(tmp_path):
    r = subprocess.run([sys.executable, "-m", "guardjit", "export", "--serve", "no_such_module:f",
                        "--out", str(tmp_path)], capture_output=True, text=True)
    assert r.returncode == 1
    assert "guardjit export --serve: error: No module named 'no_such_module'" in r.stderr
    r = subprocess.run([sys.executable, "-m", "guardjit", "export", "--serve", "guardjit.serving",
                        "--out", str(tmp_path)], capture_output=True, text=True)
    assert r.returncode == 1
    assert "expected MODULE:FACTORY" in r.stderr


class DataDependent(torch.nn.Module):
    def forward(self, x):
        if x.sum() > 0:  # control flow on a value: torch.export cannot trace it
            return x + 1
        return x - 1


def test_model_that_does_not_export_is_a_clear_error(tmp_path):
    with pytest.raises(serving.ServeExportError,
                       match=r"bucket b2_float32: torch.export.export failed: \w+"):
        serving.export_bundle(DataDependent(), [(torch.randn(2, 3),)], str(tmp_path),
                              progress=False)
    with pytest.raises(serving.ServeExportError, match="must be a torch.nn.Module"):
        serving.export_bundle(lambda x: x, [(torch.randn(2, 3),)], str(tmp_path),
                              progress=False)


class Scaled(torch.nn.Module):
    def forward(self, x, n: int):
        return x * n


def test_non_tensor_input_is_recorded_as_a_baked_constant(tmp_path):
    """torch.export bakes an int input into the package: a host serves
    x * 3 whatever n a caller meant. The manifest says so (the value of every
    non-tensor input, equal in all buckets: test_i27_review_serve_export.py
    refuses buckets that differ)."""
    man = serving.export_bundle(Scaled(), [(torch.randn(2, 3), 3)], str(tmp_path),
                                progress=False)
    assert [i["source"] for i in man["inputs"]] == ["L['x']"]
    assert man["constants"] == [{"source": "L['n']", "value": "3"}]


class PlainLinear(torch.nn.Module):
    """No cast in forward: a bfloat16 input needs bfloat16 weights."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(6, 4)

    def forward(self, x):
        return self.fc(x)


def plain_linear():
    torch.manual_seed(0)
    return PlainLinear().eval(), (torch.randn(2, 6),)


def test_dtype_bucket_serves_a_model_of_that_dtype(tmp_path):
    """``--bucket dtype=bfloat16,model_dtype=bfloat16`` casts the inputs and
    a copy of the model, so a plain Linear model exports a bfloat16 package
    (with ``dtype`` alone its bucket fails: mat1 and mat2 must have the same
    dtype). The factory's model stays float32; each package matches eager of
    its own model."""
    name, model, buckets = export.serve_case(
        "test_export_serve:plain_linear",
        ["batch=2", "batch=2,dtype=bfloat16,model_dtype=bfloat16"])
    assert buckets[0].model is None
    assert buckets[1].model is not model
    assert buckets[1].model.fc.weight.dtype == torch.bfloat16
    assert model.fc.weight.dtype == torch.float32
    b = serving.build_bundle(model, buckets, str(tmp_path), name=name, progress=False)
    names = [a["name"] for a in b.manifest["artifacts"]]
    assert names == ["b2_float32", "b2_bfloat16"]
    for a, bucket in zip(b.manifest["artifacts"], buckets):
        runner = torch._inductor.aoti_load_package(str(tmp_path / a["package"]))
        flat = torch.load(tmp_path / a["example"])
        expected = torch.load(tmp_path / a["expected"])
        with torch.no_grad():
            eager = (bucket.model or model)(*flat)
        got = runner(*flat)
        got = got if isinstance(got, (list, tuple)) else [got]
        assert got[0].dtype == eager.dtype == expected[0].dtype
        torch.testing.assert_close(got[0], eager)
        torch.testing.assert_close(expected[0], eager)


class GraphBreak(torch.nn.Module):
    def forward(self, x):
        x = x + 1
        torch._dynamo.graph_break()  # nothing to torch.export, a break to Dynamo
        return x * 2


def test_graph_break_is_a_clear_error(tmp_path):
    with pytest.raises(serving.ServeExportError,
                       match=r"bucket b2_float32: torch.compile\(fullgraph=True\) failed"):
        serving.export_bundle(GraphBreak(), [(torch.randn(2, 3),)], str(tmp_path),
                              progress=False)
    r = subprocess.run([sys.executable, "-m", "guardjit", "export", "--serve",
                        "guardjit.serving:tiny", "--dynamic", "--out", str(tmp_path)],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "--dynamic" in r.stderr


def test_duplicate_bucket_is_a_clear_error(tmp_path):
    case = serving.tiny(batches=(2,), bf16_batch=None)
    x = case.buckets[0][0]
    with pytest.raises(serving.ServeExportError, match="hit the compile unit of an earlier"):
        serving.build_bundle(case.model, [(x,), serving.Bucket((x.clone(),), name="again")],
                             str(tmp_path), progress=False)


def test_bench_serve_quick(tmp_path):
    """``bench --suite serve --quick`` routes every request as its bucket and
    writes every field (no timing assertions: shared, noisy machines)."""
    json_path = tmp_path / "serve.json"
    r = subprocess.run([sys.executable, "-m", "guardjit", "bench", "--suite", "serve", "--quick",
                        "--no-progress", "--json", str(json_path)],
                       capture_output=True, text=True, timeout=900,
                       env=dict(os.environ, PYTHONWARNINGS="ignore"))
    assert r.returncode == 0, r.stderr[-4000:]
    data = json.loads(json_path.read_text())
    assert data["artifacts"] == ["b1_float32", "b4_float32", "b16_float32", "b1_bfloat16"]
    assert set(data["sides"]) == {"dynamo_full", "dynamo_portable", "guardjit_full",
                                  "guardjit_select", "none"}
    for side, d in data["sides"].items():
        assert d["select_ns_per_request"] > 0 and d["requests_per_s"] > 0, side
    assert data["sides"]["guardjit_select"]["check_calls_per_request"] == 3.5
    counts = data["guard_counts"]["per_artifact"]["b4_float32"]
    assert counts["torch_full"] > counts["torch_keep_portable"] > counts["guardjit_portable"]
    assert counts["select"] == 1
    assert all(c == {"guards": counts["torch_full"], "kept": counts["torch_keep_portable"]}
               for c in data["guard_counts"]["dynamo_keep_portable"])
    assert "guardjit_select" in r.stdout

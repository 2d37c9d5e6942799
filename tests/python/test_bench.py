"""``python -m guardjit bench --quick`` produces every field for every model.

No timing assertions: the machines are shared and noisy. The benchmark runs
in a subprocess, as users run it (its own warnings and Dynamo state stay out
of this process).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from guardjit.bench.corpus import CORPUS
from guardjit.bench.options import (FILTERS, LABELS, LOOKUP_OPTIONS, OPTIONS, STANCE, UNSAFE,
                                    option_kwargs)
from guardjit.bench.run import MODEL_FIELDS

HF_MODELS = ("gpt2", "bert", "llama", "mistral", "t5", "qwen3-36L")
# The names these models carry in the results (qwen3-36L's says its depth).
HF_NAMES = HF_MODELS[:-1] + ("qwen3-2L", "qwen3-36L")
NUMERIC = ("guards", "dynamo_check_us", "guardjit_check_us", "ratio", "lookup_us_torch",
           "lookup_us_guardjit", "guardjit_full_check_us", "lookup_us_guardjit_full",
           "call_us_torch", "call_us_guardjit", "compile_ms",
           "python_frames_dynamo", "python_frames_guardjit")


# The deeper stacks are the same code as stack-8 at 2-8x the depth (minutes
# of Dynamo tracing each even at --quick, whose sizes they keep): the full
# bench runs them, this quick run does not.
DEEP_STACKS = ("stack-16", "stack-32", "stack-64")


def _models() -> list[str]:
    models = [m for m in CORPUS if m not in DEEP_STACKS]
    if importlib.util.find_spec("transformers") is not None:
        return models
    return [m for m in models if m not in HF_MODELS]


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    json_path, png_path = out / "bench.json", out / "bench.png"
    cmd = [sys.executable, "-m", "guardjit", "bench", "--quick", "--no-progress",
           "--json", str(json_path), "--models", *_models()]
    if importlib.util.find_spec("matplotlib") is not None:
        cmd += ["--plot", str(png_path)]
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    with open(json_path) as f:
        data = json.load(f)
    return data, proc.stdout, png_path


def test_corpus_size():
    assert len(CORPUS) >= 8


# Repeated layers of each corpus case (None: nothing repeats), full / quick.
LAYERS = {"gpt2": (4, 1), "bert": (4, 1), "llama": (4, 1), "mistral": (4, 1), "t5": (6, 2),
          "qwen3-36L": (36, 2), "resnet-cnn": (None, None), "mlp": (None, None),
          "decoder": (12, 2), "deep-decoder": (32, 4), "param-heavy": (96, 8),
          "stack-8": (8, 8), "stack-16": (16, 16), "stack-32": (32, 32), "stack-64": (64, 64)}


@pytest.mark.parametrize("quick", [True, False])
def test_corpus_layers(quick):
    """Every case says how many layers repeat (the divisor of
    lookup_per_layer_us), and it is the model's own count."""
    assert set(LAYERS) == set(CORPUS)
    for name, factory in CORPUS.items():
        if not quick and name in DEEP_STACKS + ("param-heavy",):
            continue  # the same factory code as their quick sizes, only bigger
        case = factory(quick)
        assert case.layers == LAYERS[name][0 if not quick else 1], (name, case.layers)
        if name == "qwen3-36L":
            # Qwen3-8B's depth (36 layers) at tiny widths, eval, no cache.
            cfg = case.model.config
            assert type(case.model).__name__ == "Qwen3ForCausalLM"
            assert len(case.model.model.layers) == cfg.num_hidden_layers == case.layers
            assert (cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads,
                    cfg.intermediate_size, cfg.vocab_size) == (64, 4, 2, 128, 512)
            assert not case.model.training and cfg.use_cache is False
            assert case.name == f"qwen3-{case.layers}L"
        elif case.layers is not None:
            stack = getattr(case.model, "layers", None) or getattr(case.model, "blocks", None)
            if stack is not None:
                assert len(stack) == case.layers, name


def test_floor_fields_arithmetic():
    """floor_fields turns the floor's per-round ratios (floor / guardjit)
    into guardjit / floor and divides the lookups by the layers."""
    from guardjit.bench.run import floor_fields

    entry = {"lookup_us_guardjit": 30.0, "lookup_us_torch": 600.0,
             "options": {"skip_all_guards_unsafe": {"call_us": 100.0, "call_us_guardjit": 104.0,
                                                    "call_ratio": 0.96, "call_ratio_min": 0.8,
                                                    "call_ratio_max": 1.0},
                         UNSAFE: {"status": "ok", "lookup_us": 45.0}}}
    f = floor_fields(entry, 6)
    assert f["floor_call_us"] == 100.0 and f["call_us_guardjit_vs_floor"] == 104.0
    assert f["call_overhead_vs_floor"] == pytest.approx(1 / 0.96)
    assert f["call_overhead_vs_floor_min"] == pytest.approx(1.0)
    assert f["call_overhead_vs_floor_max"] == pytest.approx(1.25)
    assert f["lookup_us_unsafe"] == 45.0
    assert f["lookup_per_layer_us"] == pytest.approx(5.0)
    assert f["lookup_per_layer_us_torch"] == pytest.approx(100.0)
    assert f["lookup_per_layer_us_unsafe"] == pytest.approx(7.5)
    none = floor_fields({"lookup_us_guardjit": 30.0, "options": {}}, None)
    assert none["lookup_per_layer_us"] is None and none["floor_call_us"] is None
    assert none["call_overhead_vs_floor"] is None and none["lookup_us_unsafe"] is None


def _check_users_terms(m: dict) -> None:
    """The users'-terms fields of one model entry and their relations."""
    name = m["name"]
    floor = m["options"]["skip_all_guards_unsafe"]
    assert isinstance(m["floor_call_us"], float) and m["floor_call_us"] > 0, (name, m)
    assert m["floor_call_us"] == floor["call_us"], name
    assert m["call_us_guardjit_vs_floor"] == floor["call_us_guardjit"], name
    lo, r, hi = (m["call_overhead_vs_floor" + k] for k in ("_min", "", "_max"))
    assert 0 < lo <= r <= hi, (name, lo, r, hi)
    un = m["options"][UNSAFE]
    if un["status"] == "ok":
        assert m["lookup_us_unsafe"] == un["lookup_us"], name
        # One set of profiler rounds: guardjit's lookup beside the unsafe
        # options' is the top-level one.
        assert un["guardjit_lookup_us"] == m["lookup_us_guardjit"], name
    if m["layers"] is None:
        assert m["lookup_per_layer_us"] is None, name
    else:
        assert isinstance(m["layers"], int) and m["layers"] > 0, name
        assert m["lookup_per_layer_us"] == pytest.approx(m["lookup_us_guardjit"] / m["layers"])


def test_users_terms_core(tmp_path):
    """``--core --quick`` on an MLP and the Qwen3 model: the whole call
    against the floor, the unsafe options' lookup and the lookup per layer
    per model, in the JSON and the table."""
    json_path = tmp_path / "core.json"
    cmd = [sys.executable, "-m", "guardjit", "bench", "--core", "--quick", "--no-progress",
           "--json", str(json_path), "--models", "mlp", "qwen3-36L"]
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    data = json.loads(json_path.read_text())
    by = {m["name"]: m for m in data["models"]}
    assert set(by) == {"mlp", "qwen3-2L"}
    for m in by.values():
        assert not m.get("errors"), (m["name"], m.get("errors"))
        _check_users_terms(m)
    assert by["mlp"]["layers"] is None and by["qwen3-2L"]["layers"] == 2
    u = data["summary"]["users_terms"]
    assert set(u["call_overhead_vs_floor"]) == set(by)
    assert u["qwen3"]["name"] == "qwen3-2L"
    for col in ("lookup µs unsafe", "lookup µs/layer guardjit", "floor call µs",
                "guardjit call vs floor"):
        assert col in proc.stdout, col


def test_options_are_torchs_and_labelled():
    """The filters are torch.compiler's six, each option has one short label
    and one torch.compile/config setting."""
    import torch

    exported = {n for n in dir(torch.compiler)
                if n.endswith("_unsafe") and n.startswith(("skip_", "keep_"))
                and n != STANCE}
    assert len(FILTERS) == 6 and set(FILTERS) == exported
    assert set(OPTIONS) == set(LABELS) and len(set(LABELS.values())) == len(LABELS)
    for name in OPTIONS:
        if name != STANCE:
            assert option_kwargs(name) != ({}, {}), name


def test_machine_and_versions(quick_run):
    data, _, _ = quick_run
    for key in ("cpu", "cores", "python", "torch", "llvm", "date"):
        assert key in data["machine"], key
    assert "versions" in data["run"]


def test_every_model_has_every_field(quick_run):
    data, _, _ = quick_run
    names = [m["name"] for m in data["models"]]
    assert len(names) == len(_models())
    for m in data["models"]:
        assert "error" not in m, (m["name"], m.get("error"))
        assert not m.get("errors"), (m["name"], m.get("errors"))
        for field in MODEL_FIELDS:
            assert field in m, (m["name"], field)
        for field in NUMERIC:
            assert isinstance(m[field], (int, float)), (m["name"], field, m[field])
        _check_users_terms(m)
        # A unit left on Dynamo's path carries its reason.
        if m["status"] != "native":
            assert m["fallback_reasons"], m["name"]


def test_every_option_is_recorded(quick_run):
    data, _, _ = quick_run
    for m in data["models"]:
        assert set(m["options"]) == set(OPTIONS), m["name"]
        for name in FILTERS + ("install_free_tensors", "use_recursive_dict_tags_for_guards"):
            e = m["options"][name]
            # Either numbers, or the failure recorded with its reason.
            if e["status"] == "error":
                assert e["error"], (m["name"], name)
            else:
                assert isinstance(e["guards"], int), (m["name"], name)
                assert isinstance(e["dynamo_check_us"], float), (m["name"], name)
                assert isinstance(e["guardjit_check_us"], float), (m["name"], name)
                if e["status"] != "native":
                    assert e["fallback_reasons"], (m["name"], name)
        st = m["options"][STANCE]
        assert st["status"] == "ok" or st.get("error"), m["name"]
        if st["status"] == "ok":
            assert isinstance(st["lookup_us_torch"], float)
            assert isinstance(st["lookup_us_guardjit"], float)
        # torch with both unsafe options beside guardjit's sound figures.
        un = m["options"][UNSAFE]
        assert un["status"] == "ok" or un.get("error"), (m["name"], un)
        if un["status"] == "ok":
            for key in ("check_us", "lookup_us", "guardjit_check_us", "guardjit_lookup_us",
                        "check_ratio", "lookup_ratio"):
                assert isinstance(un[key], float), (m["name"], key, un[key])
            assert isinstance(un["guards"], int) and isinstance(un["guardjit_guards"], int)


def test_subtree_skipping_is_measured(quick_run):
    """The top-level check and lookup are guardjit's default (subtree
    skipping on, and it answered the timed calls where a unit has a plan);
    the full check is beside them; torch's dict tags, both unsafe options and
    the guardless floor each carry check_us and lookup_us (or, for the floor,
    whose lookup torch serves outside the profiler event, the whole call)."""
    data, _, _ = quick_run
    for m in data["models"]:
        assert isinstance(m["skip_check_speedup"], float), m["name"]
        if m["skip_units"]:
            assert m["skip_hits"] > 0, (m["name"], m["skip_hits"])
        else:  # every unit declined, and the bench says why
            assert m["skip_declined"], m["name"]
        for name in LOOKUP_OPTIONS:
            e = m["options"][name]
            assert isinstance(e["check_us"], float), (m["name"], name, e)
            if e["lookup_us"] is None:
                assert name == "skip_all_guards_unsafe", (m["name"], name, e)
                assert "try_lookup_without_guard_eval" in e["lookup_note"]
                assert e["lookup_events_per_call"] < 1
                assert isinstance(e["call_us"], float) and isinstance(e["call_us_guardjit"], float)
            else:
                assert isinstance(e["lookup_us"], float), (m["name"], name, e)
    # The stacks of identical layers are in the corpus.
    assert {"stack-8", "stack-16", "stack-32", "stack-64"} <= set(CORPUS)


def test_python_frames_are_counted(quick_run):
    """Frames one check of each root enters (guardjit.lab.frames), as ints, with
    the per-function breakdown consistent with the total."""
    data, stdout, _ = quick_run
    for m in data["models"]:
        for side in ("dynamo", "guardjit"):
            n = m[f"python_frames_{side}"]
            assert isinstance(n, int) and n >= 0, (m["name"], side, n)
            by_code = m[f"python_frames_{side}_by_code"]
            assert sum(by_code.values()) <= n, (m["name"], side)
            assert all(isinstance(k, str) and ":" in k for k in by_code), by_code
        # Dynamo's tree always runs its saved-tensors-hooks lambda in Python.
        assert m["python_frames_dynamo"] >= 1, m["name"]
        reads = m["python_accessor_reads"]
        assert set(reads) == {"module_reads", "config_reads", "delegated"}, reads
        if m["name"] in HF_NAMES:
            # transformers configs run a Python __getattribute__: guardjit
            # reads them natively (docs/guard-semantics.md §13).
            assert reads["config_reads"] > 0, (m["name"], reads)
    assert "Python frames" in stdout


def test_table_and_plot(quick_run):
    data, stdout, png = quick_run
    for m in data["models"]:
        assert m["name"] in stdout
    if importlib.util.find_spec("matplotlib") is not None:
        assert png.stat().st_size > 10_000


def test_passes_are_recorded(quick_run):
    """Per model: guards and check µs as recorded, after the default
    pipeline and after each filter; the guide's combination."""
    from guardjit.bench.passes import VARIANTS

    data, stdout, _ = quick_run
    for m in data["models"]:
        p = m["passes"]
        assert p["status"] == "ok", (m["name"], p)
        assert p["none"]["passes"], m["name"]
        for name in VARIANTS:
            row = p[name]
            assert row["passes"], (m["name"], name)  # fewer guards still pass
            assert row["guards"] <= p["none"]["guards"], (m["name"], name)
            assert isinstance(row["us"], float) and isinstance(row["us_none"], float)
        assert p["skip_all_guards_unsafe"]["guards"] == 0, m["name"]
        assert p[UNSAFE].get("status") in ("native", "partial", "fallback"), (m["name"], p[UNSAFE])
    assert "free-tensors+skip-all-nn" in stdout

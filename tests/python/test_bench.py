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

HF_MODELS = ("gpt2", "bert", "llama", "mistral", "t5")
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
        if m["name"] in HF_MODELS:
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

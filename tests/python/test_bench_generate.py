"""``python -m guardjit bench --suite generate --quick``: a transformers
generate() decode loop, compiled per side, gives every field and eager's
tokens on every side.

No timing assertions (the machines are shared and noisy). The suite runs in
a subprocess, as users run it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

# transformers is a test dependency (scripts/setup.sh installs it): without it
# these tests fail, they do not skip.


@pytest.fixture(scope="module")
def quick_generate(tmp_path_factory):
    json_path = tmp_path_factory.mktemp("generate") / "generate.json"
    cmd = [sys.executable, "-m", "guardjit", "bench", "--suite", "generate", "--quick",
           "--no-progress", "--json", str(json_path)]
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(json_path.read_text()), proc.stdout


def test_tokens_identical(quick_generate):
    data, stdout = quick_generate
    assert data["tokens_identical"] is True
    assert data["sides_uncompiled"] == []
    assert len(data["tokens"]) == data["model"]["new_tokens"] == 8
    assert all(e["tokens_identical"] is True for e in data["sides"].values())
    assert "tokens identical on every side" in stdout


def test_every_side_has_every_field(quick_generate):
    from guardjit.bench.generate import SIDE_FIELDS, SIDES

    data, stdout = quick_generate
    assert data["model"] == {"name": "qwen3-2L", "layers": 2, "new_tokens": 8,
                             "prompt_tokens": 8, "backend": "eager",
                             "cache_implementation": "static"}
    assert list(data["sides"]) == ["eager", *SIDES]
    decode_calls = data["model"]["new_tokens"] - 1  # the prefill runs uncompiled
    for side in SIDES:
        e = data["sides"][side]
        for field in SIDE_FIELDS:
            assert field in e, (side, field)
        assert e["token_us"] > 0 and e["first_generate_s"] > 0, side
        assert e["token_ratio_vs_floor_min"] <= e["token_ratio_vs_floor"] \
            <= e["token_ratio_vs_floor_max"], side
        # One graph per side, compiled by the first generate(); the timed
        # rounds ran that graph (no recompile).
        assert e["graphs"] == 1 and e["recompiles"] == 0, (side, e)
        assert e["graphs_in_rounds"] == 0, (side, e)
        if side == "floor":
            # torch serves the guardless entry outside the lookup event.
            assert e["lookup_us"] is None and e["lookup_events_per_generate"] == 0
            assert "try_lookup_without_guard_eval" in e["lookup_note"]
        else:
            # Every decode step went through the compiled call's lookup.
            assert e["lookup_events_per_generate"] == decode_calls, (side, e)
            assert isinstance(e["lookup_us"], float) and e["lookup_us"] > 0, side
        assert side in stdout
    assert data["sides"]["floor"]["token_ratio_vs_floor"] == 1.0
    assert data["guardjit"]["units_seen"] >= 1
    for key in ("cpu", "cores", "torch", "date"):
        assert key in data["machine"], key


def test_differing_tokens_are_reported():
    """The table names the side whose tokens differ (the command then exits 1)."""
    from guardjit.bench.generate import format_text

    side = {"token_us": 1.0, "token_ratio_vs_floor": 1.0, "token_ratio_vs_floor_min": 1.0,
            "token_ratio_vs_floor_max": 1.0, "tokens_identical": True}
    data = {"model": {"name": "qwen3-2L", "prompt_tokens": 8, "new_tokens": 8,
                      "backend": "eager"},
            "run": {"settings": {"rounds": 1}}, "tokens_identical": False,
            "sides_uncompiled": [],
            "sides": {"torch": dict(side), "floor": dict(side, tokens_identical=False)}}
    text = format_text(data)
    assert "TOKENS DIFFER: floor" in text and "DIFFER" in text.splitlines()[-2]

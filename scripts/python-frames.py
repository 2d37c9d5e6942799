"""Python frames per guard check and the check-time ratio vs Dynamo.

    python scripts/python-frames.py [--rounds N] [MODEL ...]

MODEL: shared-config-decoder (48 layers, guardjit.models), or a bench corpus
name (deep-decoder, decoder, gpt2, ...; full size). --legacy-lambdas records
the aliasing parts and the saved-tensors-hooks lambda as Python lambdas, as
guardjit did before they were lowered (one lambda per aliasing part), for a
before/after comparison with one build. For every compile unit:
the Python frames one check of Dynamo's root and of the installed root
enter (guardjit.lab.frames.count_python_frames) on the frame locals of a real
call, the functions they are in, and the interleaved check times
(guardjit.lab.timing), as JSON lines.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import torch

import guardjit
from guardjit import models, plugin
from guardjit.bench import corpus
from guardjit.bench.capture import capture_units, entry_locals, keep_units
from guardjit.lab import frames, timing


def _case(name: str):
    if name == "shared-config-decoder":
        m = models.shared_config_decoder(48)
        return corpus.BenchCase(m.name, m.model, m.make_input)
    return corpus.CORPUS[name](False)


def measure(name: str, rounds: int) -> dict:
    case = _case(name)
    torch._dynamo.reset()
    with keep_units(), capture_units() as captured:
        model = guardjit.compile(case.model, backend="eager")
        args, kwargs = case.inputs()
        model(*args, **kwargs)
        model(*args, **kwargs)
        plugin.wait_for_tier_up()
        units = plugin.units()
    out = {"model": case.name, "units": []}
    for c, u in zip(captured, units):
        fl = c.f_locals
        if not (c.dynamo_root.check(fl) and c.final_root.check(fl)):
            fl = entry_locals(case, c.code)
        row = {
            "status": u.status,
            "python_guards": u.python_guards,
            "frames_dynamo": frames.count_python_frames(c.dynamo_root.check, fl),
            "frames_guardjit": frames.count_python_frames(c.final_root.check, fl),
            "guardjit_frames_in": frames.python_frames_by_function(c.final_root.check, fl),
        }
        r = timing.interleaved(lambda: c.dynamo_root.check(fl), lambda: c.final_root.check(fl),
                               rounds=rounds)
        row.update({"dynamo_us": round(r.a_us, 2), "guardjit_us": round(r.b_us, 2),
                    "ratio": round(r.ratio, 2)})
        out["units"].append(row)
    return out


def _legacy_lambdas() -> None:
    from guardjit import aliasing, lambdas, recorder

    def refuse(*_args, **_kwargs):
        raise aliasing.Unsupported("--legacy-lambdas")

    recorder._aliasing_guard = refuse
    lambdas.saved_tensors_hooks = lambda fn: None


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("models", nargs="*",
                   default=["shared-config-decoder", "deep-decoder", "decoder", "gpt2"])
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--legacy-lambdas", action="store_true")
    a = p.parse_args()
    if a.legacy_lambdas:
        _legacy_lambdas()
    for name in a.models:
        print(json.dumps(measure(name, a.rounds)), flush=True)


if __name__ == "__main__":
    sys.exit(main())

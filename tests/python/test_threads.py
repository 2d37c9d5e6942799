"""Several Python threads call torch.compile'd functions while the main
thread makes Dynamo compile (new shapes and dtypes: several cache entries),
evict (the recompile limit reached, torch._dynamo.reset()) and while
guardjit's background tier swaps code in (docs/threads.md).

Every result must equal eager's and no call may raise, with guardjit
installed and in plain torch (a child process with GUARDJIT unset, running
the same scenario): a failure that plain torch shows as well is torch's, and
the comparison says so."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import threading
import time

import pytest
import torch
from torch._C._dynamo.eval_frame import _debug_get_cache_entry_list

import guardjit
from guardjit import _core, plugin

SECONDS = 3.0  # of the scenario at least, per run (guardjit's and plain torch's)
ROUNDS = 9  # at least (3 resets), however slow the machine; at most 120 s


@pytest.fixture
def installed():
    assert guardjit.install()
    yield
    guardjit.uninstall()


def _fn(x, scale: float):
    return torch.relu(x) * scale + x.sum()


class _Model(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)
        self.gain = 0.5

    def forward(self, x):
        return torch.tanh(self.lin(x)) * self.gain


def run_scenario(seconds: float = SECONDS, seed: int = 0, callers: int = 3,
                 caller_compiles: bool = True, resets: str = "quiescent") -> dict:
    """The scenario; returns counts and every error seen (JSON-able).

    Callers loop over the inputs the main thread has already compiled for
    (and, once in a while, a new one: their own compiles). The main thread,
    round after round: compiles the next shape/dtype variant (a new cache
    entry; past the recompile limit Dynamo runs the frame eagerly), every
    few rounds evicts every entry with torch._dynamo.reset() and, with
    guardjit, lets the background tier swap code in.

    ``resets``: "quiescent" parks the callers between two calls for each
    reset (then they recompile what they call); "concurrent" resets while
    they run, which crashes plain torch 2.13 itself (docs/threads.md);
    "none".
    """
    rng = random.Random(seed)
    torch.manual_seed(seed)
    torch._dynamo.reset()
    model = _Model()
    fn_opt = torch.compile(_fn, backend="eager", dynamic=False)
    model_opt = torch.compile(model, backend="eager", dynamic=False)
    shapes = [(n, 8) for n in (2, 3, 4, 5, 6, 7)]
    variants = []  # (callable, eager callable, args)
    for shape in shapes:
        for dtype in (torch.float32, torch.float64):
            variants.append((fn_opt, _fn, (torch.randn(shape, dtype=dtype), 0.5)))
        variants.append((model_opt, model, (torch.randn(shape),)))
    rng.shuffle(variants)
    with torch.no_grad():
        want = [ref(*args) for _opt, ref, args in variants]

    warm = [0]  # indices the callers may use (grows; list append is atomic)
    errors: list = []
    calls = [0] * callers
    stop = threading.Event()
    pause = threading.Event()
    parked = threading.Barrier(callers + 1, timeout=60)

    def check(i: int) -> None:
        opt, _ref, args = variants[i]
        with torch.no_grad():
            out = opt(*args)
        if not torch.equal(out, want[i]):
            errors.append(f"variant {i}: result differs from eager")

    def caller(k: int) -> None:
        r = random.Random(seed * 100 + k)
        try:
            while not stop.is_set():
                if pause.is_set():
                    parked.wait()  # all callers are between two calls
                    parked.wait()  # the reset is done
                    continue
                n = len(warm)
                # Mostly warm variants; sometimes the next one (a compile here).
                i = warm[r.randrange(n)]
                if caller_compiles and r.random() < 0.05 and n < len(variants):
                    i = n
                check(i)
                calls[k] += 1
        except Exception as e:  # reported below
            errors.append(f"caller {k}: {type(e).__name__}: {e}")

    max_entries = 0
    n_resets = 0
    rounds = 0
    threads = [threading.Thread(target=caller, args=(k,)) for k in range(callers)]
    start = time.perf_counter()
    with torch._dynamo.config.patch(recompile_limit=6):
        check(0)
        for t in threads:
            t.start()
        try:
            while (time.perf_counter() - start < seconds or rounds < ROUNDS) \
                    and time.perf_counter() - start < 120:
                rounds += 1
                if len(warm) < len(variants):
                    check(len(warm))  # compile the next variant
                    warm.append(len(warm))
                else:
                    for i in range(len(variants)):
                        check(i)
                max_entries = max(max_entries, len(_debug_get_cache_entry_list(_fn.__code__)))
                if resets != "none" and rounds % 3 == 0:
                    if resets == "quiescent":
                        pause.set()
                        parked.wait()
                    torch._dynamo.reset()  # every entry and unit evicted
                    n_resets += 1
                    if resets == "quiescent":
                        pause.clear()
                        parked.wait()
                if rounds % 3 == 0:
                    plugin.wait_for_tier_up(0.05)  # let swaps land meanwhile
        except Exception as e:
            errors.append(f"main: {type(e).__name__}: {e}")
        finally:
            stop.set()
            if pause.is_set():
                parked.abort()
            for t in threads:
                t.join(60)
    alive = sum(t.is_alive() for t in threads)
    return {"errors": errors, "calls": calls, "rounds": rounds, "resets": n_resets,
            "max_entries": max_entries, "alive": alive,
            "seconds": round(time.perf_counter() - start, 2)}


def _plain_torch_run() -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GUARDJIT")}
    here = os.path.dirname(os.path.abspath(__file__))
    env["PYTHONPATH"] = here + os.pathsep + env.get("PYTHONPATH", "")
    code = ("import json, test_threads as T\n"
            "r = T.run_scenario()\n"
            "import guardjit.plugin as p\n"
            "r['guardjit_units'] = p.stats()['units_seen']\n"
            "print(json.dumps(r))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_calls_from_threads_while_compiles_evictions_and_swaps_run(installed):
    st0 = plugin.stats()
    tier0 = _core.tier_up_stats()
    got = run_scenario()
    st = plugin.stats()
    tier = _core.tier_up_stats()
    torch_run = _plain_torch_run()
    assert torch_run["guardjit_units"] == 0  # plain torch: guardjit never ran
    print("guardjit:", got, "\nplain torch:", torch_run)

    # Plain torch keeps the contract under this load; so must guardjit.
    assert torch_run["errors"] == [] and torch_run["alive"] == 0, torch_run
    assert got["errors"] == [], got
    assert got["alive"] == 0
    # The run did what it claims: callers ran throughout, the cache held
    # several entries, entries were evicted, guardjit checked the units and
    # its background tier swapped code in while the callers ran.
    assert min(got["calls"]) >= 10, got
    assert got["max_entries"] >= 3 and got["resets"] >= 3, got
    assert st["units_native"] - st0["units_native"] >= 10, (st0, st)
    assert tier["installed"] - tier0["installed"] >= 5, (tier0, tier)
    assert tier["failed"] == tier0["failed"]
    assert plugin.wait_for_tier_up(60)

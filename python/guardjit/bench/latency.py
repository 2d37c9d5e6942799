"""First-call latency and time until native code is in place (issue 15).

Per model, in this process, plain torch first and then guardjit (each after
``torch._dynamo.reset()``, both with ``backend="eager"``):

* ``first_call_ms``: the whole first call of the compiled model (Dynamo's
  trace, guard build and, with guardjit, its conversion); guardjit's first
  code is compiled off the calling thread, so the difference is what
  guardjit adds on the calling thread;
* ``native_ms`` / ``tier_up_ms``: from the end of that first call until the
  unit's check runs the first native code (``light``) and the tier-up code
  (``O1``), polled every 0.1 ms: meanwhile its calls run the interpreter;
* ``guards``: the units' guard count, and ``background_ms_per_100``: every
  background compile the compile caused (``tier_up_stats()["compile_ms"]``:
  both levels of each unit, the residual checks of subtree skipping, the
  differentiating checks) per 100 guards.

Times are medians over ``repeats`` fresh compiles of a fresh model.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import torch

from guardjit import _core, plugin, tiering
from guardjit.bench import corpus
from guardjit.bench.capture import keep_units


def _first_call_ms(compile_fn: Any, case: corpus.BenchCase) -> tuple[float, Any]:
    args, kwargs = case.inputs()
    torch._dynamo.reset()
    start = time.perf_counter()
    opt = compile_fn(case.model)
    with torch.no_grad():
        opt(*args, **kwargs)
    return (time.perf_counter() - start) * 1e3, opt


def _wait_level(check: Any, levels: tuple[str, ...], timeout_s: float = 120.0) -> float:
    """ms until ``check`` runs code at one of ``levels`` (nan on timeout)."""
    start = time.perf_counter()
    while tiering.level_of(check) not in levels:
        if time.perf_counter() - start > timeout_s:
            return float("nan")
        time.sleep(1e-4)
    return (time.perf_counter() - start) * 1e3


def _warm_up() -> None:
    """One throwaway compile per side: the first compile in a process pays
    imports and caches that neither side should be charged with."""
    import guardjit

    x = torch.randn(2, 2)
    for compile_fn in (torch.compile, guardjit.compile):
        torch._dynamo.reset()
        compile_fn(lambda t: t * 2, backend="eager")(x)
    plugin.wait_for_tier_up()
    torch._dynamo.reset()


def measure(name: str, quick: bool = True, repeats: int = 3) -> dict[str, Any]:
    import guardjit

    rows: list[dict[str, float]] = []
    _warm_up()
    for _ in range(repeats):
        case = corpus.CORPUS[name](quick)
        _first_call_ms(lambda m: torch.compile(m, backend="eager"), case)  # warm the model
        plain_ms, _ = _first_call_ms(lambda m: torch.compile(m, backend="eager"), case)
        plugin.wait_for_tier_up()
        st0 = _core.tier_up_stats()
        with keep_units():
            gj_ms, _ = _first_call_ms(lambda m: guardjit.compile(m, backend="eager"), case)
            units = [u for u in plugin.units() if u.status == "native" and u.check is not None]
        if not units:
            continue
        unit = max(units, key=lambda u: u.guards)
        native_ms = _wait_level(unit.check, ("O0", "light", "O1", "O2"))
        tier_ms = native_ms + _wait_level(unit.check, ("O1", "O2"))
        plugin.wait_for_tier_up()
        st = _core.tier_up_stats()
        guards = sum(u.guards for u in units)
        bg_ms = st["compile_ms"] - st0["compile_ms"]
        rows.append({"plain_first_call_ms": plain_ms, "guardjit_first_call_ms": gj_ms,
                     "native_ms": native_ms, "tier_up_ms": tier_ms, "guards": guards,
                     "background_ms_per_100": 100.0 * bg_ms / guards if guards else 0.0})
        plugin.clear_units()
    torch._dynamo.reset()
    if not rows:
        return {"model": name, "error": "no native unit"}
    out: dict[str, Any] = {"model": name, "repeats": len(rows)}
    for key in rows[0]:
        out[key] = statistics.median(r[key] for r in rows)
    out["first_call_ratio"] = out["guardjit_first_call_ms"] / out["plain_first_call_ms"]
    return out


def run(models: list[str], quick: bool = True, repeats: int = 3,
        progress: bool = True) -> dict[str, Any]:
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover - tqdm is a bench dependency
        tqdm = None
    it = tqdm(models, desc="latency", disable=not progress) if tqdm else models
    return {"quick": quick, "repeats": repeats, "first_tier": plugin.config.first_tier,
            "opt_level": plugin.config.opt_level, "tier_up": plugin.config.tier_up,
            "models": [measure(m, quick, repeats) for m in it]}


def format_text(data: dict[str, Any]) -> str:
    head = (f"{'model':14s} {'guards':>6s} {'plain 1st ms':>12s} {'guardjit 1st':>12s} "
            f"{'ratio':>6s} {'native in ms':>12s} {'O1 in ms':>9s} {'bg ms/100g':>10s}")
    lines = [f"first tier: {data['first_tier']} ({data['opt_level']}, then {data['tier_up']})",
             head]
    for r in data["models"]:
        if "error" in r:
            lines.append(f"{r['model']:14s} {r['error']}")
            continue
        lines.append(f"{r['model']:14s} {r['guards']:6.0f} {r['plain_first_call_ms']:12.1f} "
                     f"{r['guardjit_first_call_ms']:12.1f} {r['first_call_ratio']:6.2f} "
                     f"{r['native_ms']:12.1f} {r['tier_up_ms']:9.1f} "
                     f"{r['background_ms_per_100']:10.2f}")
    return "\n".join(lines)

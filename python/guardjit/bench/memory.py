"""Resident memory over compile/evict cycles through torch (issue 15).

Each side runs in a fresh process: ``units`` compile units (a fresh code
object each, calling a small ``nn.Module``, so every unit has the module's
guards), with ``torch._dynamo.reset()`` every ``reset_every`` units, which
evicts every cache entry. After each reset (and, with guardjit, once the
background compiles are in place) the worker collects garbage, returns free
heap to the system (``malloc_trim``) and reads ``VmRSS``. The growth per unit
is the least-squares slope of RSS over the resets after warm-up, divided by
``reset_every``: what a server that keeps recompiling pays per unit for good.

Sides: ``plain`` (torch alone, ``GUARDJIT`` unset) and ``guardjit``
(``guardjit.install()``, default settings: interpreter first, background
native code, subtree skipping). ``import_cost`` also reports what importing
guardjit adds after torch and Dynamo, split by mapping (``/proc/self/smaps``).
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
from typing import Any


def rss_kb() -> int:
    """This process's resident set (kB, ``VmRSS``)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def trim() -> None:
    """Collects garbage and hands free heap back to the system (glibc)."""
    import gc

    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:
        pass


def slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of ys over xs (0 for fewer than two points)."""
    n = len(xs)
    if n < 2:
        return 0.0
    mx, my = sum(xs) / n, sum(ys) / n
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / den if den else 0.0


def _worker(side: str, units: int, reset_every: int) -> dict[str, Any]:
    import torch
    from torch import nn

    if side == "guardjit":
        import guardjit
        from guardjit import plugin

        guardjit.install()
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 16)).eval()
    x = torch.randn(4, 16)
    points: list[tuple[int, int]] = []
    with torch.no_grad():
        for i in range(units):
            ns: dict[str, Any] = {}
            # A fresh code object per unit: one cache entry each.
            exec(f"def unit_{i}(m, x):\n    return m(x) + {i}\n", ns)
            fn = torch.compile(ns[f"unit_{i}"], backend="eager")
            fn(model, x)
            fn(model, x)
            if (i + 1) % reset_every == 0:
                if side == "guardjit":
                    plugin.wait_for_tier_up()
                torch._dynamo.reset()
                del fn, ns
                trim()
                points.append((i + 1, rss_kb()))
    out: dict[str, Any] = {"side": side, "units": units, "reset_every": reset_every,
                           "rss_kb": points}
    if side == "guardjit":
        st = guardjit.stats()
        out["units_native"] = st.get("units_native", 0)
        out["tier_up"] = st.get("tier_up", {})
    return out


def import_cost() -> dict[str, Any]:
    """RSS (kB) added by ``import guardjit._core`` after torch and Dynamo, by
    mapping. Runs in this process: call it in a fresh one."""
    import torch  # noqa: F401
    import torch._dynamo  # noqa: F401

    trim()
    before = rss_kb()
    maps_before = _rss_by_mapping()
    import guardjit._core  # noqa: F401

    trim()
    after = rss_kb()
    maps_after = _rss_by_mapping()
    delta = {k: maps_after.get(k, 0) - maps_before.get(k, 0) for k in maps_after}
    top = sorted(((v, k) for k, v in delta.items() if v > 256), reverse=True)[:8]
    return {"before_kb": before, "after_kb": after, "added_kb": after - before,
            "by_mapping_kb": {k: v for v, k in top}}


def _rss_by_mapping() -> dict[str, int]:
    """Resident kB per mapped file (anonymous mappings as "[anon]")."""
    out: dict[str, int] = {}
    name = "[anon]"
    with open("/proc/self/smaps") as f:
        for line in f:
            parts = line.split()
            if not parts:
                continue
            if "-" in parts[0] and len(parts) >= 5 and not parts[0].endswith(":"):
                name = os.path.basename(parts[5]) if len(parts) > 5 else "[anon]"
            elif parts[0] == "Rss:":
                out[name] = out.get(name, 0) + int(parts[1])
    return out


def _spawn(args: list[str], env: dict[str, str]) -> dict[str, Any]:
    res = subprocess.run([sys.executable, "-m", "guardjit.bench.memory", *args],
                         capture_output=True, text=True, env=env, check=False)
    if res.returncode != 0:
        raise RuntimeError(f"memory worker {args} failed:\n{res.stderr[-2000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def run(units: int = 1000, reset_every: int = 50, warmup_resets: int = 2) -> dict[str, Any]:
    """Both sides in fresh processes, then the import cost. Growth per unit
    (bytes) is over the resets after ``warmup_resets``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GUARDJIT")}
    sides = {}
    for side in ("plain", "guardjit"):
        data = _spawn(["--worker", side, str(units), str(reset_every)], env)
        pts = data["rss_kb"][warmup_resets:]
        data["growth_bytes_per_unit"] = slope([p[0] for p in pts],
                                              [p[1] * 1024.0 for p in pts])
        sides[side] = data
    out = {"units": units, "reset_every": reset_every, "sides": sides,
           "import": _spawn(["--import-cost"], env)}
    out["guardjit_extra_bytes_per_unit"] = (sides["guardjit"]["growth_bytes_per_unit"]
                                            - sides["plain"]["growth_bytes_per_unit"])
    return out


def format_text(data: dict[str, Any]) -> str:
    lines = [f"compile/evict cycles: {data['units']} units, torch._dynamo.reset() every "
             f"{data['reset_every']}"]
    for side, d in data["sides"].items():
        first, last = d["rss_kb"][0][1], d["rss_kb"][-1][1]
        lines.append(f"  {side:9s} RSS {first / 1024:.1f} -> {last / 1024:.1f} MB, growth "
                     f"{d['growth_bytes_per_unit'] / 1024:.2f} KB per unit")
    lines.append(f"  guardjit adds {data['guardjit_extra_bytes_per_unit'] / 1024:.2f} KB per "
                 "unit beyond plain torch")
    imp = data["import"]
    lines.append(f"import guardjit._core after torch: +{imp['added_kb'] / 1024:.1f} MB")
    for k, v in imp["by_mapping_kb"].items():
        lines.append(f"  {v / 1024:6.1f} MB  {k}")
    return "\n".join(lines)


if __name__ == "__main__":
    if sys.argv[1] == "--worker":
        print(json.dumps(_worker(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))))
    elif sys.argv[1] == "--import-cost":
        print(json.dumps(import_cost()))

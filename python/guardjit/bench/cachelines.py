"""Distinct cache lines one cold guard check touches, per corpus model.

Run under callgrind (valgrind's cache simulator; no hardware counters needed)::

    valgrind --tool=callgrind --instr-atstart=no --cache-sim=yes \\
        --LL=33554432,16,64 --callgrind-out-file=/tmp/cg/out.%p \\
        python -m guardjit.bench.cachelines --models mlp gpt2

Method. Everything outside the measured call runs uninstrumented (fast).
Per model the script compiles the model with guardjit, keeps Dynamo's root
and guardjit's installed root with frame locals both pass on (as the bench
does), and then, for each root, in a small C helper: turns instrumentation
on, evicts the simulated caches (a sweep over a buffer twice the simulated
last-level cache), zeroes the counters, makes exactly one call
``root.check(f_locals)``, dumps the counters under a label and turns
instrumentation off. With the simulated last level this large, no line the
call reads is evicted during the call, so every distinct line it touches
misses exactly once: ``DLmr + DLmw`` is the number of distinct data lines
(64 bytes) and ``ILmr`` the number of distinct instruction lines. The same is
done for ``len(f_locals)`` (the Python call itself) as a baseline, which is
subtracted. The dumps are read back by :func:`read_dumps`
(``python -m guardjit.bench.cachelines --read /tmp/cg``).

Caveats: the simulator models one level of data and instruction cache plus
the last level, no prefetcher; valgrind serializes threads. The count is of
the whole check as the cache lookup runs it from Python (Dynamo's root
preamble included), not of guardjit's native function alone.
"""

from __future__ import annotations

import argparse
import ctypes
import glob
import json
import os
import re
import subprocess
import sys
import sysconfig
import tempfile
from typing import Any

_HELPER = r"""
#include <Python.h>
#include <valgrind/callgrind.h>
#include <stdlib.h>

static char *Sweep;
static size_t SweepBytes;

/* One cold call of fn(arg), its counters dumped under `label`. */
int gj_cold_call(PyObject *fn, PyObject *arg, const char *label, long sweep_bytes) {
  if ((size_t)sweep_bytes != SweepBytes) {
    free(Sweep);
    SweepBytes = (size_t)sweep_bytes;
    Sweep = calloc(SweepBytes, 1);
    if (!Sweep) return -1;
  }
  CALLGRIND_START_INSTRUMENTATION;
  for (size_t i = 0; i < SweepBytes; i += 64)
    Sweep[i]++;
  CALLGRIND_ZERO_STATS;
  PyObject *r = PyObject_CallOneArg(fn, arg);
  CALLGRIND_DUMP_STATS_AT(label);
  CALLGRIND_STOP_INSTRUMENTATION;
  int ok = r && PyObject_IsTrue(r) == 1;
  Py_XDECREF(r);
  PyErr_Clear();
  return ok;
}
"""


def _helper() -> Any:
    d = tempfile.mkdtemp(prefix="gj-cachelines-")
    src, lib = os.path.join(d, "helper.c"), os.path.join(d, "helper.so")
    with open(src, "w") as f:
        f.write(_HELPER)
    inc = sysconfig.get_paths()["include"]
    subprocess.run(["cc", "-O1", "-shared", "-fPIC", f"-I{inc}", src, "-o", lib], check=True)
    h = ctypes.PyDLL(lib)  # keeps the GIL, unlike CDLL
    h.gj_cold_call.argtypes = [ctypes.py_object, ctypes.py_object, ctypes.c_char_p,
                               ctypes.c_long]
    h.gj_cold_call.restype = ctypes.c_int
    return h


def measure(models: list[str], reps: int, sweep_bytes: int) -> None:
    import torch

    import guardjit
    from guardjit import plugin
    from guardjit.bench.capture import capture_units, fix_frame_locals, keep_units
    from guardjit.bench.corpus import CORPUS

    h = _helper()
    torch.set_num_threads(1)
    with torch.no_grad():
        for name in models:
            case = CORPUS[name](False)
            torch._dynamo.reset()
            with keep_units(), capture_units() as cap:
                m = guardjit.compile(case.model, backend="eager")
                args, kwargs = case.inputs()
                m(*args, **kwargs)
                m(*args, **kwargs)
                plugin.wait_for_tier_up()
            fix_frame_locals(case, cap)
            for c in cap:
                for _ in range(3):  # warm: lazily built state, memo slots
                    c.dynamo_root.check(c.f_locals)
                    c.final_root.check(c.f_locals)
            for rep in range(reps):
                for i, c in enumerate(cap):
                    for side, root in (("dynamo", c.dynamo_root), ("guardjit", c.final_root)):
                        label = f"{case.name}|{i}|{side}|{rep}".encode()
                        if h.gj_cold_call(root.check, c.f_locals, label, sweep_bytes) != 1:
                            raise RuntimeError(f"{label!r}: the check failed")
                    h.gj_cold_call(len, c.f_locals, f"{case.name}|{i}|baseline|{rep}".encode(),
                                   sweep_bytes)


_EVENTS = re.compile(r"^events:\s*(.*)$", re.M)
_TOTALS = re.compile(r"^(?:summary|totals):\s*(.*)$", re.M)
_DESC = re.compile(r"^desc: Trigger: Client Request: (.*)$", re.M)


def read_dumps(directory: str) -> dict[str, Any]:
    """{model: {side: {event: median over reps}}}, with guardjit and Dynamo
    minus the baseline."""
    import statistics

    rows: dict[tuple[str, str], list[dict[str, int]]] = {}
    for path in glob.glob(os.path.join(directory, "out.*")):
        text = open(path, errors="replace").read()
        d, e, t = _DESC.search(text), _EVENTS.search(text), _TOTALS.search(text)
        if not (d and e and t):
            continue
        label = d.group(1).strip()
        parts = label.split("|")
        if len(parts) != 4:
            continue
        model, unit, side, _rep = parts
        vals = dict(zip(e.group(1).split(), map(int, t.group(1).split())))
        rows.setdefault((model, side), []).append(vals)
    out: dict[str, Any] = {}
    for (model, side), samples in rows.items():
        keys = samples[0].keys()
        out.setdefault(model, {})[side] = {k: statistics.median(s.get(k, 0) for s in samples)
                                           for k in keys}
    for model, sides in out.items():
        base = sides.get("baseline", {})
        for side in ("dynamo", "guardjit"):
            s = sides.get(side)
            if not s:
                continue
            s["data_lines"] = s.get("DLmr", 0) + s.get("DLmw", 0) - base.get("DLmr", 0) - base.get("DLmw", 0)
            s["instruction_lines"] = s.get("ILmr", 0) - base.get("ILmr", 0)
            s["instructions"] = s.get("Ir", 0) - base.get("Ir", 0)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m guardjit.bench.cachelines", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", nargs="+", default=None)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--sweep-mb", type=int, default=64,
                   help="eviction sweep, MiB (twice the simulated last level)")
    p.add_argument("--read", metavar="DIR", help="summarize the dumps in DIR instead")
    p.add_argument("--json", metavar="FILE", help="with --read: write the summary")
    args = p.parse_args(argv)
    if args.read:
        res = read_dumps(args.read)
        print("model | Dynamo data lines | guardjit data lines | Dynamo instr lines | "
              "guardjit instr lines | Dynamo instructions | guardjit instructions")
        for model, s in sorted(res.items()):
            d, g = s.get("dynamo", {}), s.get("guardjit", {})
            print(f"{model} | {d.get('data_lines')} | {g.get('data_lines')} | "
                  f"{d.get('instruction_lines')} | {g.get('instruction_lines')} | "
                  f"{d.get('instructions')} | {g.get('instructions')}")
        if args.json:
            with open(args.json, "w") as f:
                json.dump(res, f, indent=2)
        return 0
    from guardjit.bench.corpus import CORPUS

    measure(args.models or list(CORPUS), args.reps, args.sweep_mb << 20)
    return 0


if __name__ == "__main__":
    sys.exit(main())

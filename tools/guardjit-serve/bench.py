"""The numbers of tools/guardjit-serve: ns per request check and requests per
second of the C++ host, phase by phase, on the bundle of
``guardjit.serving:tiny`` (the model ``python -m guardjit bench --suite serve``
serves from Python).

    python tools/guardjit-serve/bench.py --host build/dev/tools/guardjit-serve/guardjit-serve \
        [--bundle DIR] [--out docs/results/serve-host-torch-2.13.0.json]

Python only prepares: it writes the bundle (``python -m guardjit export
--serve``, skipped when DIR already holds one) and the requests (each
artifact's example input, plus four misses), then runs the host, a process
without libpython, with ``--bench``: the host interleaves the phases in
rounds (describe, select, full, pick, run, serve, pick_miss) and reports
medians and min-max per request (MEASURING.md). A second run on the same
bundle without its GLOBAL_STATE guards shows that guard's share of the full
check. The JSON adds the machine, the versions, the load average and the
host's ldd.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile

import torch


def machine() -> dict:
    model = ""
    try:
        for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
            if line.startswith("Model name:"):
                model = line.split(":", 1)[1].strip()
    except OSError:
        pass
    return {"cpu": model, "cores": os.cpu_count(), "platform": platform.platform()}


def _llvm_version() -> str:
    try:
        return subprocess.run(["llvm-config-19", "--version"], capture_output=True,
                              text=True).stdout.strip()
    except OSError:
        return ""


def make_requests(bundle: str, path: str) -> dict:
    with open(os.path.join(bundle, "manifest.json")) as f:
        manifest = json.load(f)
    hits = [torch.load(os.path.join(bundle, a["example"])) for a in manifest["artifacts"]]
    x = hits[0][0]
    misses = {
        "dtype": [x.double()],
        "unseen batch": [torch.cat([x, x[:1]])],
        "ndim": [x[0]],
        "requires_grad": [x.clone().requires_grad_()],
    }
    torch.save(hits + list(misses.values()), path)
    return {"hits": [a["name"] for a in manifest["artifacts"]], "misses": list(misses)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--host", required=True, help="the guardjit-serve binary")
    p.add_argument("--bundle", help="bundle directory (written when it holds none)")
    p.add_argument("--out", help="write the JSON here (default: stdout)")
    p.add_argument("--passes", type=int, default=2000, help="passes over the hits per round")
    p.add_argument("--rounds", type=int, default=41)
    args = p.parse_args(argv)

    bundle = args.bundle or tempfile.mkdtemp(prefix="serve-bundle-")
    if not os.path.exists(os.path.join(bundle, "manifest.json")):
        subprocess.run([sys.executable, "-m", "guardjit", "export", "--serve",
                        "guardjit.serving:tiny", "--out", bundle, "--no-progress"],
                       check=True, stdout=subprocess.DEVNULL)
    reqs = os.path.join(bundle, "bench-requests.pt")
    mix = make_requests(bundle, reqs)
    cmd = [args.host, bundle, "--requests", reqs, "--json",
           f"--bench={args.passes}", f"--rounds={args.rounds}"]
    load_before = os.getloadavg()
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    load_after = os.getloadavg()
    report = json.loads(out.stdout)
    # Where the full check's time goes: the same bundle without its
    # GLOBAL_STATE guards (a variant directory of symlinks), run next.
    variant = tempfile.mkdtemp(prefix="serve-bundle-noglobal-")
    for name in os.listdir(bundle):
        src = os.path.join(bundle, name)
        if name.endswith(".gir"):
            with open(src) as f:
                lines = [x for x in f if not x.startswith("  guard global_state ")]
            with open(os.path.join(variant, name), "w") as f:
                f.writelines(lines)
        else:
            os.symlink(src, os.path.join(variant, name))
    vcmd = [args.host, variant] + cmd[2:]
    no_global = json.loads(subprocess.run(vcmd, capture_output=True, text=True,
                                          check=True).stdout)
    ldd = subprocess.run(["ldd", args.host], capture_output=True, text=True).stdout
    libs = sorted({line.split()[0] for line in ldd.splitlines() if line.strip()})
    ns = report["bench"]["ns_per_request"]
    result = {
        "suite": "serve-host",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine(),
        "load_average_before_after": [load_before, load_after],
        "torch": torch.__version__,
        "llvm": _llvm_version(),
        "python_of_the_preparing_script": platform.python_version(),
        "host_links": libs,
        "host_links_libpython": any("libpython" in lib for lib in libs),
        "command": " ".join(["guardjit-serve"] + cmd[1:]),
        "bundle": "guardjit.serving:tiny (python -m guardjit export --serve)",
        "requests": mix,
        "summary": {
            "ns_per_check_select": ns["select"]["median"],
            "ns_per_check_full": ns["full"]["median"],
            "ns_per_pick": ns["pick"]["median"],
            "ns_per_describe": ns["describe"]["median"],
            "ns_per_run": ns["run"]["median"],
            "ns_per_serve": ns["serve"]["median"],
            "ns_per_miss": ns.get("pick_miss", {}).get("median"),
            "requests_per_second": report["bench"]["requests_per_second"],
            "check_share_of_serve": (ns["describe"]["median"] + ns["pick"]["median"])
            / ns["serve"]["median"],
            "serve_over_run_median_of_rounds": report["bench"]["serve_over_run"]["median"],
        },
        "host": report,
        "variant_without_global_state": {
            "guards": no_global["guards"],
            "ns_per_request": {k: v["median"] for k, v in
                               no_global["bench"]["ns_per_request"].items()},
        },
    }
    text = json.dumps(result, indent=1) + "\n"
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""tools/guardjit-serve: AOTInductor packages behind portable guard sets, served
by a C++ process with no Python in it.

The bundle (three packages of one MLP: batch 1 and 4 in float32, batch 4 in
bfloat16, their guard sets, requests and eager outputs) is built by
serve_bundle.py in a child Python and cached by content (GUARDJIT_SERVE_CACHE,
set by ctest to the build tree: AOTInductor takes ~18 s per package). Then the
host binary (GUARDJIT_SERVE_BIN, set by ctest) runs alone on the requests.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile

import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
BUILDER = os.path.join(HERE, "serve_bundle.py")
BIN = os.environ.get("GUARDJIT_SERVE_BIN", "")

pytestmark = pytest.mark.skipif(
    not BIN or not os.path.exists(BIN),
    reason="GUARDJIT_SERVE_BIN is not set or does not exist: tools/guardjit-serve is "
           "built only when the Torch CMake package is found; run through "
           "`ctest -R guardjit-serve` (its configure message says why it was skipped)")


def _key() -> str:
    with open(BUILDER, "rb") as f:
        h = hashlib.sha256(f.read())
    h.update(torch.__version__.encode())
    return h.hexdigest()[:16]


def _cached(tmp_path_factory, stem: str, done_file: str, build) -> str:
    """``build(dir)`` once per content key, in the cache (or a temp dir)."""
    root = os.environ.get("GUARDJIT_SERVE_CACHE") or str(tmp_path_factory.mktemp("serve"))
    path = os.path.join(root, stem)
    if os.path.exists(os.path.join(path, done_file)):
        return path
    os.makedirs(root, exist_ok=True)
    tmp = tempfile.mkdtemp(dir=root, prefix="building-")
    try:
        build(tmp)
        try:
            os.rename(tmp, path)
        except OSError:  # another run finished first
            pass
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return path


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> str:
    def build(out: str) -> None:
        subprocess.run([sys.executable, BUILDER, out], check=True, timeout=900,
                       stdout=subprocess.DEVNULL)
    return _cached(tmp_path_factory, f"bundle-{_key()}", "expected.json", build)


def serve(bundle_dir: str, *args: str) -> dict:
    out = subprocess.run([BIN, bundle_dir, "--requests", os.path.join(bundle_dir, "requests.pt"),
                          "--json", *args],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def expected(bundle_dir: str) -> tuple[list[dict], list]:
    with open(os.path.join(bundle_dir, "expected.json")) as f:
        exp = json.load(f)
    return exp, torch.load(os.path.join(bundle_dir, "expected.pt"))


def assert_outputs_match_eager(out_file: str, eager: list, served: list[int]):
    outs = torch.load(out_file)
    assert len(outs) == len(eager)
    for i in served:
        assert len(outs[i]) == len(eager[i]) == 1, i
        assert outs[i][0].dtype == eager[i][0].dtype, i
        torch.testing.assert_close(outs[i][0], eager[i][0], msg=f"request {i}")


def test_serves_every_artifact_like_eager(bundle, tmp_path):
    exp, eager = expected(bundle)
    out_file = str(tmp_path / "out.pt")
    rep = serve(bundle, "--out", out_file)
    assert rep["artifacts"] == ["b1_float32", "b4_float32", "b4_bfloat16"]
    hits = [i for i, e in enumerate(exp) if "artifact" in e]
    for i in hits:
        assert rep["requests"][i]["artifact"] == exp[i]["artifact"], rep["requests"][i]
        assert rep["requests"][i]["via_fallback"] is False
    assert {exp[i]["artifact"] for i in hits} == set(rep["artifacts"])
    assert rep["misses"] == len(exp) - len(hits) > 0
    assert_outputs_match_eager(out_file, eager, hits)
    outs = torch.load(out_file)
    for i, e in enumerate(exp):
        if "miss" in e:
            assert len(outs[i]) == 0


def test_miss_names_the_failing_guard(bundle):
    exp, _ = expected(bundle)
    rep = serve(bundle)
    for i, e in enumerate(exp):
        if "miss" not in e:
            continue
        r = rep["requests"][i]
        assert r["artifact"] is None
        # Every artifact's failing guard is named; the expected field fails
        # on the artifact of the same dtype and batch family.
        for name in rep["artifacts"]:
            assert f"{name}: TENSOR_MATCH on L['x']: " in r["why"], r["why"]
        assert f"TENSOR_MATCH on L['x']: {e['miss']}" in r["why"], r["why"]
    text = subprocess.run([BIN, bundle, "--requests", os.path.join(bundle, "requests.pt")],
                          capture_output=True, text=True, check=True).stdout
    assert "miss: b1_float32: TENSOR_MATCH on L['x']: dtype" in text


def test_links_no_libpython():
    out = subprocess.run(["ldd", BIN], capture_output=True, text=True, check=True).stdout
    assert "libtorch_cpu" in out
    assert "libpython" not in out.lower(), out
    assert "libtorch_python" not in out, out


def test_global_state_miss_and_trust_select(bundle, tmp_path):
    exp, eager = expected(bundle)
    with open(os.path.join(bundle, "global_state.json")) as f:
        state = json.load(f)
    state["allow_tf32"] = not state["allow_tf32"]
    other = tmp_path / "state.json"
    other.write_text(json.dumps(state))
    hits = [i for i, e in enumerate(exp) if "artifact" in e]
    # Safe default: the select set passes, the full set's GLOBAL_STATE fails.
    rep = serve(bundle, f"--global-state={other}")
    for i in hits:
        r = rep["requests"][i]
        assert r["artifact"] is None, r
        assert f"{exp[i]['artifact']} (full set): GLOBAL_STATE" in r["why"], r["why"]
    # --trust-select skips the full set (unsafe, as skip_guard_eval_unsafe).
    out_file = str(tmp_path / "out.pt")
    rep = serve(bundle, f"--global-state={other}", "--trust-select", "--out", out_file)
    for i in hits:
        assert rep["requests"][i]["artifact"] == exp[i]["artifact"]
    assert_outputs_match_eager(out_file, eager, hits)


def bundle_view(bundle: str, dest, edit=None, replace: dict | None = None,
                drop: tuple = ()) -> str:
    """A copy of ``bundle`` made of symlinks, its manifest passed through
    ``edit``, files in ``replace`` (name -> bytes) written instead, files in
    ``drop`` left out."""
    dest.mkdir()
    replace = replace or {}
    for name in os.listdir(bundle):
        if name in drop:
            continue
        if name in replace:
            (dest / name).write_bytes(replace[name])
        elif name != "manifest.json":
            os.symlink(os.path.join(bundle, name), dest / name)
    with open(os.path.join(bundle, "manifest.json")) as f:
        manifest = json.load(f)
    if edit:
        edit(manifest)
    (dest / "manifest.json").write_text(json.dumps(manifest))
    return str(dest)


def test_fallback_artifact(bundle, tmp_path):
    """An artifact the select section does not list is reached only as the
    --fallback, after its full set passes."""
    exp, eager = expected(bundle)
    view = bundle_view(bundle, tmp_path / "bundle",
                       lambda m: m["select"]["sets"].pop("b4_float32"))
    b4 = [i for i, e in enumerate(exp) if e.get("artifact") == "b4_float32"]
    rep = serve(str(view))
    for i in b4:
        assert rep["requests"][i]["artifact"] is None
    out_file = str(tmp_path / "out.pt")
    rep = serve(str(view), "--fallback=b4_float32", "--out", out_file)
    for i in b4:
        assert rep["requests"][i] == {"artifact": "b4_float32", "via_fallback": True}
    assert_outputs_match_eager(out_file, eager, b4)
    for i, e in enumerate(exp):
        if e.get("miss") == "stride":
            assert "fallback b4_float32: TENSOR_MATCH on L['x']: stride" in \
                rep["requests"][i]["why"]


def test_bench_reports_every_phase(bundle):
    rep = serve(bundle, "--bench=5", "--rounds=3")
    b = rep["bench"]
    assert b["hit_requests"] == sum(r["artifact"] is not None for r in rep["requests"])
    for phase in ("describe", "select", "full", "pick", "run", "serve"):
        s = b["ns_per_request"][phase]
        assert 0 < s["min"] <= s["median"] <= s["max"], (phase, s)
    assert b["requests_per_second"] > 0
    assert rep["guards"]["select"] == 3 and rep["guards"]["full"] >= 6


def test_serves_export_serve_bundle(tmp_path_factory, tmp_path):
    """The bundle `python -m guardjit export --serve` writes (guardjit.serving,
    the user-facing builder): the host serves each artifact's example input
    and matches its eager output."""
    # scripts/test.sh installs guardjit before ctest runs: an installed
    # guardjit without guardjit.serving is a stale install, a failure.
    from guardjit import serving
    with open(serving.__file__, "rb") as f:
        key = hashlib.sha256(f.read() + torch.__version__.encode() + b"b2,b8bf16")
    key = key.hexdigest()[:16]

    def build(out: str) -> None:
        # Two packages (AOTInductor compiles are slow): batch 2 float32,
        # batch 8 bfloat16.
        subprocess.run([sys.executable, "-m", "guardjit", "export", "--serve",
                        "guardjit.serving:tiny", "--bucket", "batch=2",
                        "--bucket", "batch=8,dtype=bfloat16", "--out", out, "--no-progress"],
                       check=True, timeout=900, stdout=subprocess.DEVNULL)
    path = _cached(tmp_path_factory, f"export-serve-{key}", "manifest.json", build)
    with open(os.path.join(path, "manifest.json")) as f:
        manifest = json.load(f)
    arts = manifest["artifacts"]
    assert len(arts) == 2
    reqs = [torch.load(os.path.join(path, a["example"])) for a in arts]
    torch.save(reqs, tmp_path / "requests.pt")
    out_file = tmp_path / "out.pt"
    out = subprocess.run([BIN, path, "--requests", str(tmp_path / "requests.pt"),
                          "--out", str(out_file), "--json"],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    rep = json.loads(out.stdout)
    assert [r["artifact"] for r in rep["requests"]] == [a["name"] for a in arts], rep
    outs = torch.load(out_file)
    for a, o in zip(arts, outs):
        eager = torch.load(os.path.join(path, a["expected"]))
        assert len(o) == len(eager)
        for x, y in zip(o, eager):
            torch.testing.assert_close(x, y, msg=a["name"])


def test_request_errors_are_per_request(bundle, tmp_path):
    reqs = [[torch.randn(1, 16), torch.randn(1, 16)],  # two inputs for one
            torch.randn(4, 16)]
    torch.save(reqs, tmp_path / "r.pt")
    out = subprocess.run([BIN, bundle, "--requests", str(tmp_path / "r.pt"), "--json"],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 1, out.stderr
    rep = json.loads(out.stdout)
    assert rep["errors"] == 1
    assert rep["requests"][0] == {"artifact": None,
                                  "error": "the request has 2 tensors, the model takes 1"}
    assert rep["requests"][1]["artifact"] == "b4_float32"
    torch.save({"not": "a list"}, tmp_path / "d.pt")
    out = subprocess.run([BIN, bundle, "--requests", str(tmp_path / "d.pt")],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 1
    assert out.stderr.strip() == f"guardjit-serve: error: {tmp_path / 'd.pt'}: " \
                                 "expected a list of requests"


def test_a_request_dlpack_cannot_describe_is_a_request_error(bundle, tmp_path):
    """A quantized tensor has no DLPack dtype: describe() reports it for that
    request (before the fix, at::getDLDataType's c10::Error escaped ServeHost
    and terminated the host)."""
    with pytest.warns(UserWarning):  # torch deprecates quantized creation
        q = torch.quantize_per_tensor(torch.randn(1, 16), 0.1, 0, torch.qint8)
    torch.save([[q], torch.randn(4, 16)], tmp_path / "q.pt")
    out = subprocess.run([BIN, bundle, "--requests", str(tmp_path / "q.pt"), "--json"],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 1, out.stderr
    rep = json.loads(out.stdout)
    assert rep["errors"] == 1
    err = rep["requests"][0]["error"]
    assert err.startswith("request input L['x']: cannot be described as a DLTensor: "), err
    assert "not supported by dlpack" in err, err
    assert rep["requests"][1]["artifact"] == "b4_float32"


def _set(d: dict, key, value) -> None:
    d[key] = value


# case -> (manifest edit, files replaced, extra arguments, expected error)
BUNDLE_ERRORS = {
    "format": (lambda m: _set(m, "format", "guardjit-serve/0"), None, [],
               'manifest.json: format is not "guardjit-serve/1"'),
    "set": (lambda m: _set(m["artifacts"][0], "set", "nope"), None, [],
            "b1_float32.gir: no guard set named 'nope'"),
    "source": (lambda m: _set(m["inputs"][0], "source", "L['y']"), None, [],
               "reads L['x'], which is not a manifest input"),
    "package": (None, {"b4_float32.pt2": b"not a zip"}, [],
                "b4_float32.pt2: cannot load the AOTInductor package"),
    "fallback": (None, None, ["--fallback=nope"], "--fallback: no artifact named 'nope'"),
}


@pytest.mark.parametrize("case", list(BUNDLE_ERRORS))
def test_bundle_errors_name_the_file(bundle, tmp_path, case):
    edit, replace, args, want = BUNDLE_ERRORS[case]
    view = bundle_view(bundle, tmp_path / "bundle", edit, replace)
    out = subprocess.run([BIN, view, "--requests", os.path.join(bundle, "requests.pt"), *args],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 1
    assert out.stderr.startswith("guardjit-serve: error: "), out.stderr
    assert want in out.stderr, out.stderr
    assert out.stdout == ""


def test_concurrent_requests_get_the_sequential_answers(bundle):
    """ServeHost's thread contract: pick and serve from several threads at
    once (two runners per package) answer as the sequential pass did."""
    rep = serve(bundle, "--threads=4", "--repeat=10", "--num-runners=2")
    c = rep["concurrent"]
    assert c["threads"] == 4
    assert c["served"] == 4 * 10 * len(rep["requests"])
    assert c["mismatches"] == 0


def test_no_global_state_record_is_a_request_error(bundle, tmp_path):
    view = bundle_view(bundle, tmp_path / "bundle", drop=("global_state.json",))
    out = subprocess.run([BIN, view, "--requests", os.path.join(bundle, "requests.pt"),
                          "--json"], capture_output=True, text=True, timeout=600)
    assert out.returncode == 1
    rep = json.loads(out.stdout)
    # The hits pass a select set, then their full set needs the record; the
    # misses fail every select set (no GLOBAL_STATE there) and stay misses.
    exp, _ = expected(bundle)
    assert rep["errors"] == sum("artifact" in e for e in exp)
    assert rep["misses"] == sum("miss" in e for e in exp)
    assert "GLOBAL_STATE" in rep["requests"][0]["error"]
    assert "give --global-state" in rep["requests"][0]["error"]
    rep = serve(view, f"--global-state={os.path.join(bundle, 'global_state.json')}")
    assert rep["errors"] == 0 and rep["misses"] == 5

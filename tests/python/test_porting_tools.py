"""The porting tools of docs/porting.md, against the running torch.

* The committed table of the running release is what gen-torch-tables.py
  generates now: a table left stale after a change to the generator or to
  torch fails here.
* diff-torch-releases.py finds no change between an interpreter and itself.
* With GUARDJIT_OTHER_PYTHON naming an interpreter with another torch, it
  compares the two releases (older first) and, for 2.13.0 -> 2.14.1, finds
  what the port to 2.14.1 had to handle (issue 24).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GEN = os.path.join(ROOT, "scripts", "gen-torch-tables.py")
DIFF = os.path.join(ROOT, "scripts", "diff-torch-releases.py")
OTHER = os.environ.get("GUARDJIT_OTHER_PYTHON")
ENV = dict(os.environ, PYTHONWARNINGS="ignore")


def run(*args: str) -> str:
    p = subprocess.run(list(args), capture_output=True, text=True, env=ENV, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    return p.stdout


def release(python: str) -> str:
    out = run(python, "-c", "import importlib.metadata as m; print(m.version('torch'))")
    return out.strip().split("+")[0]


def load_diff_module():
    spec = importlib.util.spec_from_file_location("diff_torch_releases", DIFF)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def version_key(rel: str) -> tuple[int, ...]:
    return tuple(int(p) for p in rel.split(".") if p.isdigit())


def test_committed_table_is_the_generated_one(tmp_path):
    import torch

    rel = torch.__version__.split("+")[0]
    committed = os.path.join(ROOT, "lib", "Import", "TorchTables", f"torch-{rel}.def")
    assert os.path.exists(committed), f"no table for torch {rel}: see docs/porting.md"
    out = tmp_path / "table.def"
    run(sys.executable, GEN, "-o", str(out))
    with open(committed, encoding="utf-8") as f:
        assert out.read_text() == f.read(), \
            f"{committed} is stale: run scripts/gen-torch-tables.py with this interpreter"
    run(sys.executable, GEN, "--check")


def test_diff_of_a_release_with_itself_finds_no_change():
    report = json.loads(run(sys.executable, DIFF, sys.executable, sys.executable, "--json"))
    assert report["changed"] is False
    assert report["old"]["torch"] == report["new"]["torch"]
    for name, e in report["fingerprints"].items():
        assert e["bytecode_changed"] is False, name
        assert e.get("reviewed_in_new", True), f"{name}: not the fingerprint pyattr.py reviewed"
    # The report for people, from the same comparison.
    assert "no change in torch's guard machinery" in load_diff_module().render(report)


@pytest.mark.skipif(not OTHER, reason="GUARDJIT_OTHER_PYTHON names no other torch")
def test_diff_with_another_release():
    pythons = sorted([sys.executable, OTHER], key=lambda p: version_key(release(p)))
    old_rel, new_rel = release(pythons[0]), release(pythons[1])
    assert old_rel != new_rel, "GUARDJIT_OTHER_PYTHON has the same torch release"
    r = json.loads(run(sys.executable, DIFF, *pythons, "--json", "--show-code"))
    assert r["changed"] is True
    if (old_rel, new_rel) != ("2.13.0", "2.14.1"):
        return
    # What issue 24 lists for 2.13.0 -> 2.14.1.
    guard_methods = r["guard-builder"]["guard_methods"]
    assert r["config"]["guard_related_defaults_changed"][
        "use_lamba_guard_for_object_aliasing"] == ["True", "False"]
    assert guard_methods["added"] == ["COW_TENSOR_MATCH"]
    for source in ("ContextVarGetSource", "UnwrapCollectiveTensorSource"):
        assert source in r["sources"]["added"]
        assert source in r["sources"]["handled_added"]
    assert "set.__len__(" in "\n".join(guard_methods["diffs"]["SEQUENCE_LENGTH"])
    assert "_force_dict_keys_match" in "\n".join(guard_methods["diffs"]["DICT_KEYS_MATCH"])
    assert "guard_build_local_state" in r["signatures"]["CheckFunctionManager.__init__"]["added"]
    assert "local_state" in r["guards-state"]["added"]
    assert "LocalState" in r["pybind"]["classes_added"]
    assert sorted(r["pybind"]["methods"]["RootGuardManager"]["added"]) == \
        ["get_local_state", "set_local_state"]
    assert "assert_size_stride_grouped" in r["pybind"]["functions"]["added"]
    assert "LocalState" in r["pyi"]["classes_added"]
    assert "assert_size_stride_grouped" in r["pyi"]["functions"]["added"]
    # Found beyond the list.
    assert r["tables"] == {"dtypes": {"added": {"bcomplex32": 46}}}
    assert r["sources"]["changed"]["NonSerializableSetGetItemSource"]["name_template"][1] \
        .startswith("f'___set_getitem(")
    assert "___set_getitem" in r["closure-vars"]["added"]
    assert list(r["headers"].get("code_changed", {})) == ["compiled_autograd.h"]
    # torch 2.14.1's COW and ContextVar.get templates are new; the rest is
    # the same bytecode.
    new_templates = {k for k, e in r["fingerprints"].items() if e.get("missing_in") == ["old"]}
    assert len(new_templates) == 5, new_templates
    assert not any(e.get("bytecode_changed") for e in r["fingerprints"].values())
    assert all(e["reviewed_in_new"] for e in r["fingerprints"].values() if "reviewed_in_new" in e)

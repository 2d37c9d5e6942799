"""The on-disk object cache across processes (docs/object-cache.md).

A child process builds a guard set over its own live objects, compiles it
with ``GUARDJIT_CACHE_DIR`` set and checks it on passing and failing frame
locals against the interpreter. Run twice on one directory: the first run
compiles and stores, the second (a fresh process: other addresses, other
memo slots) must hit and agree with the interpreter. The full-size version
(every corpus set, ~1,000-guard sets) is bench/ObjectCacheBench.cpp.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap


CHILD = textwrap.dedent(
    """
    import json, sys, types
    from guardjit import _core

    n = int(sys.argv[1])
    keep = []  # add_object borrows: objects must live until bind()

    def obj(x):
        keep.append(x)
        return x

    s = _core.GuardSet("cross_process")
    int_t = s.add_object("type", int, True, "int")
    str_t = s.add_object("type", str, True, "str")
    d_key = s.add_object("key", "d", True, "'d'")
    d = s.add_value("frame_local", 0, "L['d']", name="d", key=d_key)
    for i in range(n):
        k = s.add_object("key", obj(f"k{i}"), True, repr(f"k{i}"))
        v = s.add_value("dict_get_item", d, f"L['d']['k{i}']", key=k)
        s.add_guard("dict_contains", [d], object=k, int=1)
        if i % 2:
            s.add_guard("type_match", [v], object=int_t)
            c = s.add_object("constant", obj(i * 1000), True, str(i * 1000))
            s.add_guard("equals_match", [v], object=c)
        else:
            s.add_guard("type_match", [v], object=str_t)
    bound = _core.bind(s)
    compiled = _core.compile(bound, "light")
    native = _core.make_guard(bound, compiled)
    interp = _core.make_guard(bound, None)

    good = {f"k{i}": (i * 1000 if i % 2 else f"s{i}") for i in range(n)}
    inputs = [{"d": good}, {"d": dict(good, extra=1)}, {"d": {}}, {}]
    for i in (0, 1, n - 1):
        inputs.append({"d": dict(good, **{f"k{i}": 3.5})})
    answers = []
    for _ in range(2):  # the second round runs on filled memos
        for f_locals in inputs:
            a, b = bool(native(f_locals)), bool(interp(f_locals))
            answers.append([a, b])
    print(json.dumps({
        "stats": compiled.stats,
        "answers": answers,
        "cache": _core.object_cache_stats(),
    }))
    """
)


def _run(cache_dir: str, n: int) -> dict:
    env = dict(os.environ, GUARDJIT_CACHE_DIR=cache_dir)
    r = subprocess.run(
        [sys.executable, "-c", CHILD, str(n)],
        capture_output=True, text=True, timeout=300, env=env,
    )
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def _agree(out: dict) -> None:
    answers = out["answers"]
    assert all(a == b for a, b in answers), answers
    assert any(a for a, _ in answers) and not all(a for a, _ in answers)


def test_second_process_hits_and_agrees(tmp_path):
    n = 40
    cache = str(tmp_path / "cache")
    first = _run(cache, n)
    assert not first["stats"]["cache_hit"]
    assert first["cache"]["light"]["stores"] == 1, first["cache"]
    _agree(first)
    assert stat.S_IMODE(os.stat(cache).st_mode) == 0o700
    files = os.listdir(cache)
    assert len(files) == 1 and files[0].endswith(".o"), files

    second = _run(cache, n)
    assert second["stats"]["cache_hit"], second
    assert second["cache"]["light"]["hits"] == 1, second["cache"]
    assert second["stats"]["guards"] == first["stats"]["guards"]
    assert second["stats"]["inlined"] == first["stats"]["inlined"]
    _agree(second)
    assert second["answers"] == first["answers"]


def test_a_damaged_file_is_a_miss_in_the_next_process(tmp_path):
    cache = str(tmp_path / "cache")
    _run(cache, 3)
    (name,) = os.listdir(cache)
    path = os.path.join(cache, name)
    with open(path, "rb") as f:
        data = bytearray(f.read())
    data[-50] ^= 0xFF
    with open(path, "wb") as f:
        f.write(bytes(data))
    out = _run(cache, 3)
    assert not out["stats"]["cache_hit"]
    assert out["cache"]["light"]["rejected"] == 1
    _agree(out)
    assert _run(cache, 3)["stats"]["cache_hit"]  # rewritten


def test_off_and_unusable_directories(tmp_path):
    out = _run("off", 3)
    assert not out["stats"]["cache_hit"]
    assert out["cache"]["light"]["dir"] == ""
    _agree(out)
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    out = _run(str(shared), 3)
    assert out["cache"]["light"]["dir"] == ""
    assert "writable by group or others" in out["cache"]["light"]["status"]
    _agree(out)
    assert os.listdir(shared) == []

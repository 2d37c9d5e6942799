"""tests/sanitizers/leak_report.py, the judge of the LeakSanitizer run
(scripts/sanitize.sh asan), on synthetic reports: a suppression for CPython
or torch never excuses a stack with a guardjit frame, and a leak nothing
explains fails the run."""

from __future__ import annotations

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tests" / "sanitizers" / "leak_report.py"

TORCH_FRAME = ("    #1 0x7f56f17fabf8 in torch::impl::PythonSymNodeImpl::dispatch_common_(char const*)"
               " (/site-packages/torch/lib/libtorch_python.so+0x9fabf8)")
OUR_FRAME = ("    #2 0x7f56f17fac00 in guardjit::BoundGuardSet::bind(_object*)"
             f" {ROOT}/lib/Runtime/BoundGuardSet.cpp:120")
# DWARF names a source file relative to the build directory, and a pybind11
# lambda is only "operator()": the file alone makes it guardjit's.
OUR_LAMBDA_FRAME = "    #1 0x7f56f17fac00 in operator() ../../../python/src/Module.cpp:455"
NUMPY_FRAME = ("    #1 0x7f56f1700000 in init_unknown_thing"
               " (/site-packages/numpy/_core/_other.so+0x1000)")


def report(*stacks: list[str]) -> str:
    out = ["leak_cycles: 1 cycles, 3 native units", "=" * 65,
           "==1==ERROR: LeakSanitizer: detected memory leaks", ""]
    for frames in stacks:
        out += ["Direct leak of 48 byte(s) in 1 object(s) allocated from:",
                "    #0 0x7f56f56b94c8 in operator new(unsigned long) asan_new_delete.cpp:95",
                *frames, ""]
    out.append("SUMMARY: AddressSanitizer: 48 byte(s) leaked in 1 allocation(s).")
    return "\n".join(out)


def judge(tmp_path, text: str, rc: int = 23) -> subprocess.CompletedProcess:
    log = tmp_path / "leak.log"
    log.write_text(text)
    return subprocess.run([sys.executable, str(SCRIPT), str(log), "--rc", str(rc)],
                          capture_output=True, text=True)


def test_torch_leak_with_a_suppression_passes(tmp_path):
    r = judge(tmp_path, report([TORCH_FRAME]))
    assert r.returncode == 0, r.stdout
    assert "0 with a guardjit frame, 0 unexplained" in r.stdout


def test_a_guardjit_frame_fails_even_under_a_matching_suppression(tmp_path):
    r = judge(tmp_path, report([OUR_FRAME, TORCH_FRAME]))
    assert r.returncode == 1
    assert "1 with a guardjit frame" in r.stdout and "BoundGuardSet::bind" in r.stdout


def test_a_frame_in_a_source_file_of_this_tree_is_guardjits(tmp_path):
    r = judge(tmp_path, report([OUR_LAMBDA_FRAME]))
    assert r.returncode == 1 and "1 with a guardjit frame" in r.stdout


def test_an_unexplained_leak_fails(tmp_path):
    r = judge(tmp_path, report([TORCH_FRAME], [NUMPY_FRAME]))
    assert r.returncode == 1
    assert "1 unexplained" in r.stdout and "init_unknown_thing" in r.stdout


def test_a_run_that_did_not_finish_fails(tmp_path):
    r = judge(tmp_path, "Traceback (most recent call last):\nRuntimeError: boom\n", rc=1)
    assert r.returncode == 1 and "the run failed" in r.stdout

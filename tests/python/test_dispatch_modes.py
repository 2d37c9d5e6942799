"""TENSOR_MATCH masks the Python dispatch keys by torch's *thread-local*
"in a mode without ignore_compile_internals" flag: a dispatch mode active in
another thread must not change this thread's answer (found by adversarial
testing: guardjit once read the process-wide Python variable)."""

from __future__ import annotations

import threading

import torch
from torch._dynamo.testing import CompileCounter
from torch.utils._python_dispatch import TorchDispatchMode

import guardjit
from guardjit import plugin


class PassThrough(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


class OtherThreadInMode:
    """Keeps a TorchDispatchMode active in a second thread."""

    def __enter__(self):
        self.entered, self.done = threading.Event(), threading.Event()

        def body():
            with PassThrough():
                self.entered.set()
                self.done.wait()

        self.thread = threading.Thread(target=body)
        self.thread.start()
        self.entered.wait()

    def __exit__(self, *exc):
        self.done.set()
        self.thread.join()


def double(x):
    return x * 2


def python_key_included():
    return torch._C._IncludeDispatchKeyGuard(torch._C.DispatchKey.Python)


def test_mode_in_other_thread_does_not_change_the_answer():
    x = torch.ones(3)
    guardjit.compile(double, backend="eager")(x)
    (unit,) = plugin.units()
    f_locals = {"x": x}
    with OtherThreadInMode(), python_key_included():
        expected = unit.dynamo_root.check(f_locals)
        assert unit.native_root.check(f_locals) == expected
        assert unit.bound.interpret(f_locals) == expected
    assert expected  # the Python key is masked on this thread


def test_mode_in_this_thread_agrees():
    x = torch.ones(3)
    guardjit.compile(double, backend="eager")(x)
    (unit,) = plugin.units()
    with PassThrough():
        f_locals = {"x": x}
        expected = unit.dynamo_root.check(f_locals)
        assert unit.native_root.check(f_locals) == expected
        assert unit.bound.interpret(f_locals) == expected


def _frames(compile_fn) -> int:
    torch._dynamo.reset()
    counter = CompileCounter()
    compiled = compile_fn(double, backend=counter)
    x = torch.ones(3)
    compiled(x)
    with OtherThreadInMode(), python_key_included():
        compiled(x)
    return counter.frame_count


def test_no_extra_recompile():
    assert _frames(guardjit.compile) == _frames(torch.compile)


def test_compiled_under_excluded_autograd_key_is_native():
    """apply() uses DispatchKeySet's `-`, which keeps backend bits: a unit
    compiled with AutogradCPU excluded must still convert and agree."""
    x = torch.ones(3)
    with torch._C._ExcludeDispatchKeyGuard(
            torch._C.DispatchKeySet(torch._C.DispatchKey.AutogradCPU)):
        guardjit.compile(double, backend="eager")(x)
        (unit,) = plugin.units()
        assert unit.status == "native", unit.reason
        assert unit.native_root.check({"x": x}) == unit.dynamo_root.check({"x": x}) is True
    assert unit.native_root.check({"x": x}) == unit.dynamo_root.check({"x": x})

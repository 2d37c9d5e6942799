"""GUARDJIT_LOGS sets the Python logger and the C++ (spdlog) one alike
(issue 13, item 7), and anything unexpected is a warning naming the guard
set and the guard it concerns."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import guardjit
from guardjit import _core, _logging, models, plugin

# A conversion (Python debug line, C++ debug line for the JIT), then a bind
# failure raised in C++ (C++ warning line), then a Python warning.
SCRIPT = textwrap.dedent("""
    import logging, torch, guardjit
    from guardjit import _core, models
    case = models.two_input_mlp()
    guardjit.compile(case.model, backend="eager")(*case.make_input())
    guardjit.plugin.wait_for_tier_up()  # the JIT's debug line: background thread
    broken = _core.GuardSet("broken")  # an int where an attribute name goes
    broken.add_value("getattr", 0, "L['x'].5", key=broken.add_object("key", 5, True, "5"))
    try:
        _core.bind(broken)
        raise AssertionError("bound")
    except ValueError:
        pass
    logging.getLogger("guardjit").warning("python side")
    print("levels", _core.log_level(), logging.getLogger("guardjit").getEffectiveLevel())
""")

CXX_DEBUG = "[guardjit] debug: guard set 0/0: "
PY_DEBUG = "[guardjit] debug: compile unit 0/0: "
CXX_WARNING = ("[guardjit] warning: guard set broken: cannot bind: value #1 (getattr L['x'].5): "
               "attribute name must be a str")
PY_WARNING = "[guardjit] warning: python side"


def _run(value: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GUARDJIT")}
    if value is not None:
        env["GUARDJIT_LOGS"] = value
    return subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True,
                          text=True, timeout=300, cwd="/")


@pytest.mark.parametrize("value, levels, shown", [
    (None, "warning 30", {CXX_WARNING, PY_WARNING}),
    ("debug", "debug 10", {CXX_DEBUG, PY_DEBUG, CXX_WARNING, PY_WARNING}),
    ("INFO", "info 20", {CXX_WARNING, PY_WARNING}),
    ("warning", "warning 30", {CXX_WARNING, PY_WARNING}),
    ("error", "error 40", set()),
    ("off", "off 60", set()),
])
def test_one_switch_sets_both_loggers(value, levels, shown):
    r = _run(value)
    assert r.returncode == 0, r.stderr
    assert f"levels {levels}" in r.stdout
    lines = r.stderr.splitlines()
    for marker in (CXX_DEBUG, PY_DEBUG, CXX_WARNING, PY_WARNING):
        assert any(l.startswith(marker) for l in lines) == (marker in shown), (marker, lines)


def test_unknown_value_warns_once_and_means_info():
    r = _run("+guards")
    assert r.returncode == 0, r.stderr
    assert "levels info 20" in r.stdout
    assert sum("GUARDJIT_LOGS='+guards' is not one of" in l for l in r.stderr.splitlines()) == 1


@pytest.fixture
def records():
    got: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record):
            got.append(record)

    handler = Keep(level=logging.DEBUG)
    log = logging.getLogger("guardjit")
    log.addHandler(handler)
    yield got
    log.removeHandler(handler)
    _logging.configure()


def test_explain_names_the_failing_guard():
    case = models.two_input_mlp()
    guardjit.compile(case.model, backend="eager")(*case.make_input())
    (unit,) = plugin.units()
    f_locals = dict(unit.f_locals)
    assert unit.bound.explain(f_locals) == ""
    name = next(k for k, v in f_locals.items() if isinstance(v, torch.Tensor))
    f_locals[name] = torch.zeros(7, 1, 1)
    why = unit.bound.explain(f_locals)
    assert not unit.bound.interpret(f_locals)
    assert why.startswith("guard #") and f"TENSOR_MATCH on L['{name}']" in why, why


def test_disagreement_is_a_warning_with_set_and_guard(monkeypatch, records):
    # The interpreter sees other frame locals than Dynamo checked: the unit
    # stays on Dynamo's path (same output as plain torch) and the warning
    # names the compile unit and the guard.
    convert = plugin._convert

    def skewed(wrapper, f_locals, code):
        f_locals = dict(f_locals)
        name = next(k for k, v in f_locals.items() if isinstance(v, torch.Tensor))
        f_locals[name] = torch.zeros(7, 1, 1)
        return convert(wrapper, f_locals, code)

    monkeypatch.setattr(plugin, "_convert", skewed)
    _logging.configure("warning")
    case = models.two_input_mlp()
    args = case.make_input()
    want = case.model(*args)
    out = guardjit.compile(case.model, backend="eager")(*args)
    assert torch.equal(out, want)
    (unit,) = plugin.units()
    assert unit.status == "dynamo"
    warnings = [r for r in records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, [r.getMessage() for r in records]
    msg = warnings[0].getMessage()
    assert msg.startswith(f"compile unit {unit.name} (")
    assert "interpreter disagrees with Dynamo" in msg
    assert "concerns guard #" in msg and "TENSOR_MATCH on L['" in msg, msg


def test_documented_gaps_are_info_not_warnings(monkeypatch, records):
    _logging.configure("debug")
    before = len(records)
    plugin._fallback("9/9", 3, "unsupported accessor: X")
    plugin._fallback("9/9", 3, "JIT: boom", unexpected=True)
    levels = [r.levelno for r in records[before:]]
    assert levels == [logging.INFO, logging.WARNING]


def test_configure_at_run_time_sets_both():
    try:
        assert _logging.configure("error") == "error"
        assert _core.log_level() == "error"
        assert logging.getLogger("guardjit").level == logging.ERROR
        assert _logging.configure("debug") == "debug"
        assert _core.log_level() == "debug"
    finally:
        _logging.configure()
    with pytest.raises(ValueError, match="unknown log level"):
        _core.set_log_level("loud")


@pytest.mark.parametrize("name, value, field, default, message", [
    ("GUARDJIT_MODE", "bogus", "mode", "native",
     "GUARDJIT_MODE='bogus' is not one of native, interpreter: using 'native'"),
    ("GUARDJIT_FIRST_TIER", "later", "first_tier", "background",
     "GUARDJIT_FIRST_TIER='later' is not one of background, sync: using 'background'"),
    ("GUARDJIT_SUBTREE_SKIP", "banana", "subtree_skip", True,
     "GUARDJIT_SUBTREE_SKIP='banana' is not one of 1, on, true, yes, 0, off, false, no: "
     "using '1'"),
])
def test_a_bad_environment_value_warns_and_keeps_the_default(monkeypatch, records, name, value,
                                                             field, default, message):
    monkeypatch.setenv(name, value)
    assert getattr(plugin.Config(), field) == default
    assert [r.getMessage() for r in records] == [message]


def test_environment_values_are_case_insensitive(monkeypatch, records):
    monkeypatch.setenv("GUARDJIT_MODE", "Interpreter")
    monkeypatch.setenv("GUARDJIT_SUBTREE_SKIP", "OFF")
    c = plugin.Config()
    assert c.mode == "interpreter" and c.subtree_skip is False and not records

"""GUARDJIT_LOGS: one switch for guardjit's Python logger and its C++ one.

``GUARDJIT_LOGS`` takes a Python logging level name, as ``TORCH_LOGS`` takes
its levels: ``debug`` (every conversion and JIT compile), ``info`` (also every
unit left on Dynamo's path, with the reason), ``warning`` (the default:
anything unexpected, with the guard set and the guard it concerns),
``error``, ``off``. It sets the level of the ``guardjit`` Python logger and
of the C++ spdlog logger (``_core.set_log_level``) alike; both write
``[guardjit] level: message`` lines to stderr. Any other value warns once and
means ``info``. :func:`configure` changes the level at run time.

guardjit also speaks through torch's own logging, so its lines appear where
torch's do and under torch's switches (docs/torch-tools.md):

- ``TORCH_LOGS=guards`` (``torch._logging.set_logs(guards=True)``): one line
  per compile unit guardjit converts (its unit id, guard count, tier, subtree
  skip plan) or leaves on Dynamo's path (with the reason);
- ``TORCH_LOGS=recompiles``: on a recompile, the first guard that fails in
  guardjit's check of each cache entry (the interpreter's ``explain``; the
  recompile reason torch prints beside it comes from Dynamo's own tree);
- ``TORCH_TRACE=dir`` (tlparse): a ``guardjit_unit`` JSON artifact per
  unit (converted or left to Dynamo), a ``guardjit_recompile`` one naming
  the failing guard on a recompile, and :func:`trace_artifact` for any other
  report.

The artifact loggers are named ``torch._dynamo.guardjit.__guards`` and
``...__recompiles``: under ``torch`` so that torch's handler and format apply.
They are independent of ``GUARDJIT_LOGS``.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any, Callable

LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
          "warn": logging.WARNING, "error": logging.ERROR, "critical": logging.CRITICAL,
          "off": logging.CRITICAL + 10}
DEFAULT = "warning"

log = logging.getLogger("guardjit")
_handler: logging.Handler | None = None


class _Formatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        # spdlog's short names, so both loggers' lines read alike
        record.gj_level = {"WARNING": "warning", "CRITICAL": "critical"}.get(
            record.levelname, record.levelname.lower())
        return super().format(record)


def configure(value: str | None = None) -> str:
    """Sets both loggers from ``value`` (default: ``GUARDJIT_LOGS``, else
    ``warning``). Returns the level name in effect."""
    global _handler
    raw = os.environ.get("GUARDJIT_LOGS", "") if value is None else value
    name = raw.strip().lower() or DEFAULT
    if name not in LEVELS:
        sys.stderr.write(f"[guardjit] warning: GUARDJIT_LOGS={raw!r} is not one of "
                         f"{', '.join(sorted(LEVELS))}; using info\n")
        name = "info"
    if _handler is None:
        _handler = logging.StreamHandler()
        _handler.setFormatter(_Formatter("[guardjit] %(gj_level)s: %(message)s"))
        log.addHandler(_handler)
        log.propagate = False  # our own handler: no second copy via the root
    log.setLevel(LEVELS[name])
    from guardjit import _core

    _core.set_log_level("off" if name == "off" else name)
    return name


# --- torch's logging (TORCH_LOGS artifacts, TORCH_TRACE) ---------------------

_TORCH_QNAME = "torch._dynamo.guardjit"
_artifact_logs: dict[str, logging.Logger] = {}


def artifact_log(artifact: str) -> logging.Logger:
    """torch's artifact logger ``artifact`` ("guards", "recompiles") for
    guardjit: it logs at DEBUG when ``TORCH_LOGS`` (or ``set_logs``) enables
    that artifact."""
    lg = _artifact_logs.get(artifact)
    if lg is None:
        from torch._logging import getArtifactLogger

        lg = _artifact_logs[artifact] = getArtifactLogger(_TORCH_QNAME, artifact)
    return lg


def tracing() -> bool:
    """True when ``TORCH_TRACE`` (or another structured-trace handler) is on:
    artifacts are written only then."""
    from torch._logging._internal import trace_log

    return bool(trace_log.handlers)


def trace_artifact(name: str, payload: Any | Callable[[], Any]) -> None:
    """Emits a tlparse structured artifact ``name`` (JSON) into the
    ``TORCH_TRACE`` log, attached to the compile being traced if any.
    ``payload`` is a JSON-serializable value, or a function returning one
    (called only when tracing is on). Does nothing when tracing is off."""
    if not tracing():
        return
    import torch._logging

    payload_fn = payload if callable(payload) else (lambda: payload)
    torch._logging.trace_structured(
        "artifact",
        metadata_fn=lambda: {"name": name, "encoding": "json"},
        payload_fn=payload_fn,
        expect_trace_id=False)


def unit_payload(name: str, status: str, guards: int, python_guards: int, ir: Any,
                 check: Any, skip_declined: str, compile_ms: float) -> dict[str, Any]:
    """The ``guardjit_unit`` artifact of a converted unit (also what the
    ``guards`` line says)."""
    from guardjit import _core

    skip = _core.skip_stats(check) if check is not None else None
    return {
        "unit": name,
        "status": status,  # "native" or "interpreter" (the mode chosen)
        "level": _core.guard_level(check) if check is not None else None,  # None: interpreter now
        "guards": guards,
        "python_guards": python_guards,
        "checked_guards": ir.num_guards,  # after the pipeline
        "kinds": dict(sorted(ir.count_by_kind().items())),
        "compile_ms": round(compile_ms, 3),
        "subtree_skip": dict(skip) if skip is not None else None,
        "subtree_skip_declined": skip_declined,
    }


def unit_converted(name: str, status: str, guards: int, python_guards: int, ir: Any,
                   check: Any, skip_declined: str, compile_ms: float) -> None:
    """Reports a unit guardjit now checks to torch's ``guards`` log and as a
    ``guardjit_unit`` artifact. Cheap when neither is on."""
    guards_log = artifact_log("guards")
    logging_on = guards_log.isEnabledFor(logging.DEBUG)
    if not logging_on and not tracing():
        return
    payload = unit_payload(name, status, guards, python_guards, ir, check, skip_declined,
                           compile_ms)
    if logging_on:
        skip = payload["subtree_skip"]
        if skip is not None:
            plan = (f"subtree skip: {skip['subtrees']} subtrees, "
                    f"{skip['residual_guards']} residual guards")
        else:
            plan = f"no subtree skip ({skip_declined})" if skip_declined else "no subtree skip"
        level = payload["level"]
        runs = f"native {level} code" if level else "the interpreter"
        guards_log.debug(
            "guardjit checks unit %s: %d guards (%d checked after the pipeline, %d Python); "
            "mode %s, runs %s; %s", name, guards, payload["checked_guards"], python_guards,
            status, runs, plan)
    trace_artifact("guardjit_unit", payload)


def unit_left(name: str, guards: int, reason: str) -> None:
    """Reports a unit left on Dynamo's path to torch's ``guards`` log and as a
    ``guardjit_unit`` artifact."""
    guards_log = artifact_log("guards")
    if guards_log.isEnabledFor(logging.DEBUG):
        guards_log.debug("guardjit leaves unit %s (%d guards) to Dynamo: %s", name, guards, reason)
    trace_artifact("guardjit_unit", lambda: {"unit": name, "status": "dynamo",
                                             "guards": guards, "reason": reason})


def check_failed(name: str, ir: Any, f_locals: Any) -> None:
    """On a recompile (Dynamo's check_verbose of a guardjit unit): names the
    first guard that fails in guardjit's check of `f_locals` in torch's
    ``recompiles`` log and as a ``guardjit_recompile`` artifact. Runs the
    interpreter only when either is on."""
    recompiles_log = artifact_log("recompiles")
    logging_on = recompiles_log.isEnabledFor(logging.DEBUG)
    if not logging_on and not tracing():
        return
    from guardjit import _core

    try:
        why = _core.bind(ir).explain(f_locals) or "none (the check passes)"
    except Exception as e:  # diagnostics only
        why = f"unknown ({e!r})"
    if logging_on:
        recompiles_log.debug("guardjit unit %s: first failing guard: %s", name, why)
    trace_artifact("guardjit_recompile", {"unit": name, "first_failing_guard": why})

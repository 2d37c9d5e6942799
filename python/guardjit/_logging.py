"""GUARDJIT_LOGS: one switch for guardjit's Python logger and its C++ one.

``GUARDJIT_LOGS`` takes a Python logging level name, as ``TORCH_LOGS`` takes
its levels: ``debug`` (every conversion and JIT compile), ``info`` (also every
unit left on Dynamo's path, with the reason), ``warning`` (the default:
anything unexpected, with the guard set and the guard it concerns),
``error``, ``off``. It sets the level of the ``guardjit`` Python logger and
of the C++ spdlog logger (``_core.set_log_level``) alike; both write
``[guardjit] level: message`` lines to stderr. Any other value warns once and
means ``info``. :func:`configure` changes the level at run time.
"""

from __future__ import annotations

import logging
import os
import sys

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

"""GUARDJIT=1: routes every torch.compile through guardjit, so existing
programs and test suites run unchanged with it.

``_guardjit_autoload`` (imported at start-up by guardjit-autoload.pth) calls
:func:`activate` when torch's Dynamo is first imported, never earlier: a
process that does not import Dynamo does not load torch or guardjit.
"""

import sys

# An older guardjit-autoload.pth imports this module at start-up: hand over
# to the lazy hook (importing it adds its finder).
try:
    import _guardjit_autoload  # noqa: F401
except ImportError:  # pragma: no cover - installed with the package
    pass


def activate() -> bool:
    """``guardjit.install()``; one line on stderr instead of an exception."""
    try:
        import guardjit

        return guardjit.install()
    except Exception as e:  # never stop the program from importing torch
        sys.stderr.write("guardjit: GUARDJIT=1 but guardjit could not be installed "
                         f"({type(e).__name__}: {e}); torch.compile keeps its own guards\n")
        return False

"""Imported at interpreter start-up (guardjit-autoload.pth) when GUARDJIT=1:
routes every torch.compile through guardjit, so existing programs and test
suites run unchanged with it."""

import sys

try:
    import guardjit

    guardjit.install()
except Exception as e:  # never stop the interpreter from starting
    sys.stderr.write(f"guardjit: GUARDJIT=1 but guardjit could not be installed: {e!r}\n")

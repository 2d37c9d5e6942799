"""GUARDJIT=1: installs guardjit when torch's Dynamo is first imported.

guardjit-autoload.pth imports this module at interpreter start-up when the
environment variable GUARDJIT is "1". It imports nothing but ``sys`` (which
``site`` has loaded already) and adds one ``sys.meta_path`` finder, so a
process that never imports ``torch._dynamo`` (``python -c 'print(1)'``, or a
helper process that imports neither torch nor Dynamo) never loads torch or
guardjit. When ``torch._dynamo`` has finished executing, and neither torch
nor a guardjit module is still half-imported (``import torch`` alone does not
import Dynamo in torch 2.13; ``from guardjit import plugin`` does, from inside
guardjit), the finder removes itself and calls
``guardjit._autoload.activate()``, which runs ``guardjit.install()``; else the
end of the next such import retries.

The wrapped loader is transient: the module's ``__loader__`` and
``__spec__.loader`` are the original loader again once it has executed.
Errors never reach the importing program: at most one line on stderr.

This file is a top-level module (installed beside the .pth) because importing
anything inside the ``guardjit`` package imports torch.
"""

import sys

_done = False


def _watched(name):
    # torch and Dynamo (the trigger), and guardjit's own modules: a guardjit
    # module that imports Dynamo (``from guardjit import plugin`` first)
    # must finish before guardjit.install() can import it.
    return name in ("torch", "torch._dynamo", "guardjit") or name.startswith("guardjit.")


class _Loader:
    """Runs the original loader, then offers the moment to activate."""

    def __init__(self, loader, name):
        self._loader = loader
        self._name = name

    def __getattr__(self, attr):  # get_source, get_resource_reader, ...
        return getattr(self._loader, attr)

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        try:
            self._loader.exec_module(module)
        finally:
            spec = getattr(module, "__spec__", None)
            if spec is not None and spec.loader is self:
                spec.loader = self._loader
            if getattr(module, "__loader__", None) is self:
                module.__loader__ = self._loader
        _activate_if_ready(just_loaded=self._name, module=module)


class _Finder:
    """A sys.meta_path finder that only wraps the loaders of _watched modules."""

    def find_spec(self, name, path=None, target=None):
        if _done or not _watched(name):
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = _Loader(spec.loader, name)
        return spec


_finder = _Finder()


def _busy(just_loaded):
    """Whether torch or a guardjit module is still executing (other than the
    one whose loader just returned, which importlib still marks)."""
    for name in [n for n in sys.modules if n == "torch" or _watched(n) and n != "torch._dynamo"]:
        spec = getattr(sys.modules.get(name), "__spec__", None)
        if name != just_loaded and getattr(spec, "_initializing", False):
            return True
    return False


def _activate_if_ready(just_loaded, module):
    """Called after each watched module has executed: installs guardjit once
    Dynamo is loaded and nothing it needs is half-imported (else a later
    watched module's end retries)."""
    global _done
    torch = sys.modules.get("torch")
    if _done or torch is None or "torch._dynamo" not in sys.modules or _busy(just_loaded):
        return
    if just_loaded == "torch._dynamo":
        # importlib binds torch._dynamo only after this returns; guardjit
        # reads it as an attribute.
        setattr(torch, "_dynamo", module)
    _done = True
    if _finder in sys.meta_path:
        sys.meta_path.remove(_finder)
    try:
        from guardjit import _autoload

        _autoload.activate()
    except BaseException as e:  # never break the program's import of torch
        if isinstance(e, (KeyboardInterrupt, SystemExit)):
            raise
        sys.stderr.write("guardjit: GUARDJIT=1 but guardjit cannot be imported "
                         f"({type(e).__name__}: {e}); torch.compile keeps its own guards\n")


def install():
    """Adds the finder (idempotent); activates at once if Dynamo is loaded."""
    if "torch._dynamo" in sys.modules and "torch" in sys.modules:
        _activate_if_ready("torch", sys.modules["torch._dynamo"])
    elif _finder not in sys.meta_path and not _done:
        sys.meta_path.insert(0, _finder)


install()

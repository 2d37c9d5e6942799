"""Process-independent text: what may go into a ``.gir`` that is checked in.

Dynamo's guard descriptions carry things that change from one process or one
machine to the next: object addresses in reprs (``<function f at 0x7f..>``),
object ids in verbose code parts (``___check_obj_id(L['f'], 140234..)``) and
absolute paths of installed files (``/root/.pyenv/.../site-packages/x.py``).
:func:`normalize` rewrites them to fixed spellings so that exporting the same
model twice, from any checkout, virtualenv or machine, writes the same bytes.

The recorder applies it to object reprs (descriptions only; binding uses the
live objects, never the text), before truncating them, so a repr's cut point
does not depend on the length of an address or a path.
:mod:`guardjit.export` applies it to the whole printed set (``loc=`` paths
and ``verbose=`` code parts). The replacements contain no ``"`` or ``\\``,
so a normalized ``.gir`` stays valid text.
"""

from __future__ import annotations

import functools
import os
import re
import sysconfig

# ` at 0x7f8087d31b60` in default reprs (functions, code, modules' loaders).
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
# The id argument of Dynamo's ID_MATCH / TYPE_MATCH code parts
# (torch/_dynamo/guards.py: `___check_obj_id(<source>, <id>)`).
_CHECK_ID = re.compile(r"(___check_(?:obj|type)_id\(.*?, )\d+\)")
# The globals Dynamo installs by object id (OutputGraph.install_global_by_id:
# `{prefix}_{id(value)}_c{compile_id}`), e.g. G['_139730387299568_c0'].
_GLOBAL_BY_ID = re.compile(r"_\d{6,}(_c\d+)")
# Any absolute path into an installed-packages directory.
_SITE = re.compile(r"(?:/[^/\s\"'<>:,]+)+/(?:site|dist)-packages/")


@functools.cache
def _directories() -> tuple[str, str]:
    """This package's directory and the standard library's ("" if unknown)."""
    stdlib = (sysconfig.get_paths().get("stdlib") or "").rstrip("/")
    return os.path.dirname(os.path.abspath(__file__)), stdlib


@functools.cache
def _torch_short_package_dir() -> str:
    """This package's directory as Dynamo's user locations spell it.

    torch.utils._traceback.shorten_filename drops the path the file has in
    common with torch's parent directory: ``guardjit/models.py`` when
    guardjit is installed beside torch, but ``ork/venv/.../guardjit/models.py``
    from a virtualenv elsewhere (the common path is ``/``). Empty when it is
    already ``guardjit``."""
    try:
        from torch.utils._traceback import shorten_filename
    except Exception:
        return ""
    short = shorten_filename(_directories()[0])
    return "" if short in ("guardjit", _directories()[0]) else short


def normalize(text: str) -> str:
    """``text`` with addresses, object ids and install paths replaced:
    ``<guardjit>/`` (this package, installed or in a checkout),
    ``<site-packages>/``, ``<stdlib>/``, ``, <id>)``, ``_<id>_c0``; addresses
    are dropped."""
    text = _ADDRESS.sub("", text)
    text = _CHECK_ID.sub(r"\1<id>)", text)
    text = _GLOBAL_BY_ID.sub(r"_<id>\1", text)
    guardjit_dir, stdlib = _directories()
    text = text.replace(guardjit_dir + "/", "<guardjit>/")
    short = _torch_short_package_dir()
    if short:
        text = text.replace(short + "/", "guardjit/")
    # site-packages before the stdlib: it usually lies inside it.
    text = _SITE.sub("<site-packages>/", text)
    return text.replace(stdlib + "/", "<stdlib>/") if stdlib else text

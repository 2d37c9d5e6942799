"""The package shows its architecture.

The product (``guardjit.compile``, the plugin and what it imports, the
command line) is the top level of ``guardjit``; tools used only by tests,
benchmarks, the fuzzer, the demo and scripts live in the subpackages
``guardjit.bench``, ``guardjit.fuzz`` and ``guardjit.lab``. Product modules
import nothing from those, and the imports of the whole package form no
circle. The imports are read from the source with ``ast``, so an import
inside a function counts as much as one at the top of a file.
"""

from __future__ import annotations

import ast
import importlib.machinery
import pathlib
import subprocess
import sys

import guardjit

PACKAGE = pathlib.Path(guardjit.__file__).parent
# guardjit.advise* are tools on the lab's side too (they run the bench's
# sides and the fuzzer's mutations); reached as `import guardjit.advise`.
LAB = ("guardjit.bench", "guardjit.fuzz", "guardjit.lab", "guardjit.advise",
       "guardjit.advise_measure", "guardjit.advise_guards", "guardjit.advise_safety",
       "guardjit.advise_report", "guardjit.advise_script")
# The command line reaches every subcommand, the lab's (bench, fuzz, demo)
# included; it imports them inside the subcommand that runs them.
CLI = "guardjit.__main__"


def _modules() -> dict[str, pathlib.Path]:
    """Every module of the package (extension modules too) -> its file."""
    suffixes = (".py", *importlib.machinery.EXTENSION_SUFFIXES)
    out = {}
    for path in PACKAGE.rglob("*"):
        suffix = next((s for s in suffixes if path.name.endswith(s)), None)
        if suffix is None or "__pycache__" in path.parts:
            continue
        parts = ["guardjit", *path.relative_to(PACKAGE).parts]
        parts[-1] = path.name[: -len(suffix)]
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _imports(name: str, path: pathlib.Path, modules: dict[str, pathlib.Path]) -> set[str]:
    """The modules of the package that ``name`` imports, anywhere in its file.

    ``from guardjit import plugin`` is an arrow to ``guardjit.plugin`` (not to
    the package, which Python imports first in any case);
    ``from guardjit import compile`` one to ``guardjit`` itself.
    """
    def known(dotted: str) -> str | None:
        while dotted and dotted not in modules:
            dotted = dotted.rpartition(".")[0]
        return dotted or None

    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(up + ([node.module] if node.module else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base
                       for a in node.names]
        else:
            continue
        for t in targets:
            if t == "guardjit" or t.startswith("guardjit."):
                m = known(t)
                if m is not None and m != name:
                    found.add(m)
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: (_imports(name, path, modules) if path.suffix == ".py" else set())
            for name, path in modules.items()}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of ``graph`` as a path (first = last), or None."""
    done: set[str] = set()
    stack: list[str] = []
    on_stack: set[str] = set()

    def visit(node: str) -> list[str] | None:
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt in on_stack:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in done:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        on_stack.discard(node)
        done.add(node)
        return None

    for start in sorted(graph):
        if start not in done:
            found = visit(start)
            if found:
                return found
    return None


def _in_lab(name: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in LAB)


def test_the_graph_sees_imports_at_the_top_and_inside_functions():
    graph = _graph()
    assert "guardjit.recorder" in graph["guardjit.plugin"]  # top of the file
    assert "guardjit._core" in graph["guardjit.plugin"]  # an extension module
    assert "guardjit.bench.passes" in graph["guardjit.bench.run"]
    assert "guardjit.lab.demo" in graph[CLI]  # inside a function
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_every_module_imports():
    """In a fresh process, with warnings as errors, as the suite runs."""
    names = sorted(_modules())
    code = "import importlib, sys\nfor n in sys.argv[1:]:\n    importlib.import_module(n)\n"
    r = subprocess.run([sys.executable, "-W", "error", "-c", code, *names],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]


def test_no_import_circle():
    circle = _cycle(_graph())
    assert circle is None, " -> ".join(circle)


def test_product_imports_nothing_from_the_lab():
    graph = _graph()
    product = [m for m in graph if not _in_lab(m) and m != CLI]
    assert "guardjit.plugin" in product and "guardjit.lab.routing" not in product
    wrong = {m: sorted(t for t in graph[m] if _in_lab(t)) for m in product}
    assert not {m: t for m, t in wrong.items() if t}


def test_subpackages_are_the_lab():
    """A new subpackage says which side it is on (here, or at the top)."""
    packages = {p.parent for p in PACKAGE.rglob("__init__.py")} - {PACKAGE}
    names = {"guardjit." + ".".join(p.relative_to(PACKAGE).parts) for p in packages}
    assert all(_in_lab(n) for n in names), sorted(names)

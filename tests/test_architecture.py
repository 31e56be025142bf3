"""The core's map: layers that import only downwards, no import circle, no Qt and no source in
the core (import-linter contracts in pyproject.toml), a docstring on every sub-package, and no
long file without a reason."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent


def test_import_contracts_are_kept():
    r = subprocess.run(
        [sys.executable, "-c", "from importlinter.cli import lint_imports_command; "
         "lint_imports_command()"],
        cwd=ROOT, capture_output=True, text=True,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Contracts: 4 kept, 0 broken" in r.stdout
    assert "The core's layers: each imports only those below it KEPT" in r.stdout
    assert "The core imports no source KEPT" in r.stdout
    assert "Sources import the core only through its plug-in API (idt_desk.plugin) KEPT" \
        in r.stdout


def test_importing_the_core_loads_no_qt():
    code = (
        "import sys, idt_desk, idt_desk.experiments.analyze, idt_desk.cli.main; "
        "bad = [m for m in sys.modules if m.split('.')[0] in ('PySide6', 'pyqtgraph')]; "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_the_window_starts_without_the_tables_libraries():
    """pandas and pyarrow cost the window's start a second on a loaded 2-core machine and it
    needs neither before a recording is loaded or exported."""
    code = (
        "import sys, idt_desk_widgets.main_window; "
        "bad = [m for m in ('pandas', 'pyarrow') if m in sys.modules]; "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env={**os.environ, "QT_QPA_PLATFORM": "offscreen"})
    assert r.returncode == 0, r.stdout + r.stderr


def _cycles(graph, modules):
    """Strongly connected components of more than one module (Tarjan), as sorted lists."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.find_modules_directly_imported_by(v) & modules:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(modules):
        if v not in index:
            visit(v)
    return out


def test_no_import_circle_in_the_core():
    import grimp

    graph = grimp.build_graph("idt_desk")
    # The package itself re-exports the public API from every layer: not a module of a layer.
    modules = graph.modules - {"idt_desk"}
    assert _cycles(graph, modules) == []
    # The check finds a circle when there is one.
    graph.add_import(importer="idt_desk.metrics.tokens", imported="idt_desk.detection.monitor")
    assert _cycles(graph, modules) == [["idt_desk.detection.monitor", "idt_desk.metrics.tokens"]]


def test_every_subpackage_says_what_it_holds():
    for init in sorted((ROOT / "idt_desk").glob("*/__init__.py")):
        doc = __import__("ast").get_docstring(__import__("ast").parse(init.read_text()))
        assert doc and len(doc.split()) >= 30, f"{init}: a one-paragraph docstring"


def test_no_long_file_without_a_reason():
    """Over 600 lines, a module's docstring says why it is one file ("One file: ...")."""
    import ast

    long = []
    for folder in ("idt_desk", "sources", "widgets"):
        for f in sorted((ROOT / folder).rglob("*.py")):
            text = f.read_text()
            if text.count("\n") > 600:
                doc = ast.get_docstring(ast.parse(text)) or ""
                if "One file:" not in doc:
                    long.append(f"{f.relative_to(ROOT)} ({text.count(chr(10))} lines)")
    assert long == []


def test_the_plugin_api_hands_out_the_cores_own_objects_and_nothing_else():
    """``idt_desk.plugin``: every name in ``__all__`` is the object of the module it names;
    an unknown one is refused with the list (the shipped sources are kept to it by the
    import-linter contract above)."""
    import importlib

    import idt_desk.plugin as api

    assert api.__all__ == sorted(api.__all__) and len(api.__all__) == len(set(api.__all__))
    for name in api.__all__:
        home = api._MODULES.get(name)
        if home is not None:
            assert getattr(api, name) is importlib.import_module(home)
        else:
            assert getattr(api, name) is getattr(importlib.import_module(api._WHERE[name]), name)
    assert dir(api) == api.__all__
    with pytest.raises(AttributeError, match="a plugin may import: ACTION_SMOOTHING"):
        api.Sesion  # noqa: B018 (a typo)


#: Other libraries' underscore names this code must use: argparse names its sub-parsers' type
#: only so; llama-cpp-python's context (the KV cache's size) has no public accessor;
#: Gymnasium's MuJoCo environments build their observation only in ``_get_obs`` (the
#: frozen source reads it, and the twin predicts S' through its copy's).
FOREIGN_PRIVATE = ("argparse._SubParsersAction", "self.llm._ctx", "u[1]._get_obs",
                   "self._env._get_obs")
PACKAGES = {"idt_desk": "idt_desk", "sources": "idt_desk_sources", "widgets": "idt_desk_widgets"}


def _own_names(tree) -> set[str]:
    """Names a module defines: its functions, classes, variables and attributes of self."""
    import ast

    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and \
                isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
            names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
    return names


def _reach_ins(tree, module: str) -> list[str]:
    """Underscore names of another module: ``x._name`` where ``_name`` is not this module's
    own, ``from m import _name``, and a package's private module imported from outside it."""
    import ast

    own, package = _own_names(tree), module.rsplit(".", 1)[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and \
                not node.attr.startswith("__") and node.attr not in own:
            base = node.value
            if not (isinstance(base, ast.Name) and base.id in ("self", "cls")) and \
                    ast.unparse(node) not in FOREIGN_PRIVATE:
                found.append(f"{node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.ImportFrom) and node.module:
            home, _, last = node.module.rpartition(".")
            if last.startswith("_") and not last.startswith("__") and \
                    not (package + ".").startswith(home + "."):
                found.append(f"{node.lineno}: from {node.module} (another package's private "
                             "module)")
            found += [f"{node.lineno}: from {node.module} import {a.name}" for a in node.names
                      if a.name.startswith("_") and not a.name.startswith("__")]
    return found


def test_no_module_reaches_into_another_modules_private_names():
    """Over the whole tree: a module uses another's public names only (its own privates,
    those of classes it defines, and its own package's private modules are its business)."""
    import ast

    bad = {}
    for folder, package in PACKAGES.items():
        for f in sorted((ROOT / folder).rglob("*.py")):
            rel = f.relative_to(ROOT / folder).with_suffix("")
            module = ".".join((package, *rel.parts))
            if found := _reach_ins(ast.parse(f.read_text()), module):
                bad[str(f.relative_to(ROOT))] = found
    assert bad == {}


def test_the_reach_in_checker_sees_each_form():
    """The check above fails on the forms it forbids (it is not vacuous)."""
    import ast

    code = ("from idt_desk.recordings.files import _hidden\n"
            "from idt_desk_sources.gym._source import GymSource\n"
            "def f(mon):\n    return mon._windows, self._mine\n")
    found = _reach_ins(ast.parse(code), "idt_desk.cli.bench")
    assert [x.split(":")[0] for x in found] == ["1", "2", "4"], found
    # Its own package's private module, and its own class's private name, are allowed.
    own = "from idt_desk_sources.gym._source import GymSource\nclass A:\n    def f(self, o):" \
          "\n        self._x = 1\n        return o._x\n"
    assert _reach_ins(ast.parse(own), "idt_desk_sources.gym.bench") == []

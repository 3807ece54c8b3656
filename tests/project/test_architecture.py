"""The package's layout (docs/architecture.md): layers that only import downwards, no import cycles, folders
that say their job.

The layers are import-linter's contract in pyproject.toml; the cycle scan below reads every import,
deferred ones and those under TYPE_CHECKING included, which a layers contract alone would let pass
inside one package.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import pytest_npuprecision

PACKAGE = Path(pytest_npuprecision.__file__).parent
ROOT = PACKAGE.parent


def module_name(path: Path, package: Path) -> str:
    parts = list(path.relative_to(package.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, package: Path) -> list[tuple[str, tuple[str, ...]]]:
    """What ``path`` imports of the package anywhere in its body, as (module, names imported from it)."""
    name = module_name(path, package)
    here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(a.name, ()) for a in node.names if a.name.split(".")[0] == package.name]
        elif isinstance(node, ast.ImportFrom):
            base = here[:len(here) - node.level + 1] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            if target.split(".")[0] == package.name:
                found.append((target, tuple(a.name for a in node.names)))
    return found


def import_graph(package: Path) -> dict[str, set[str]]:
    """Each module's imports of the package's modules. ``from pkg import mod`` imports ``pkg.mod``;
    it imports ``pkg`` itself only for a name that is no submodule (a package's own names)."""
    modules = {module_name(p, package): p for p in package.rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        edges = set()
        for target, names in imports_of(path, package):
            submodules = {f"{target}.{n}" for n in names} & modules.keys()
            edges |= submodules
            if len(submodules) < len(names) or not names:
                edges.add(target)
        graph[name] = {e for e in edges if e in modules and e != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def test_no_module_imports_itself_back_even_lazily():
    assert cycles(import_graph(PACKAGE)) == []


def test_the_scan_finds_a_deferred_cycle_and_one_through_a_package(tmp_path):
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("")
    (package / "a.py").write_text("from .sub import b\n")
    (package / "sub" / "b.py").write_text("def f():\n    from ..a import g\n")
    (package / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import d\n")
    (package / "d.py").write_text("from pkg.c import x\n")
    assert sorted(cycles(import_graph(package))) == [["pkg.a", "pkg.sub.b"], ["pkg.c", "pkg.d"]]


def test_every_package_says_its_job():
    # A folder that grows gets subfolders by family (ops/fused/, ops/table/, bounds/terms/), not a cap.
    for folder in [PACKAGE, *(p.parent for p in PACKAGE.rglob("__init__.py"))]:
        init = folder / "__init__.py"
        assert ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))), f"{init} says nothing of its job"


def test_every_family_s_bound_terms_are_in_the_independence_contract():
    import re

    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")  # tomllib is Python 3.11's: read the one list
    block = text.split('name = "each op family\'s bound terms stand alone"')[1].split("]")[0]
    independent = re.findall(r'"([\w.]+)"', block.split("modules = [")[1])
    terms = sorted(f"{PACKAGE.name}.bounds.terms.{p.stem}" for p in (PACKAGE / "bounds" / "terms").glob("*_terms.py"))
    assert sorted(independent) == terms


def _layer(module: str) -> str:
    return module.split(".")[1] if module.count(".") else ""


def test_other_layers_import_a_package_s_names_from_its_init():
    """``from ..precision import Rules``, never ``from ..precision.rules import Rules``: each package's
    __init__ names what other layers use (docs/architecture.md), and each such name is there."""
    import importlib

    deep = []
    for path in PACKAGE.rglob("*.py"):
        here = module_name(path, PACKAGE)
        for target, names in imports_of(path, PACKAGE):
            if _layer(target) in ("", _layer(here)) or _layer(here) == "":
                continue
            if target.count(".") > 1:
                deep.append(f"{here} imports {target}")
                continue
            package = importlib.import_module(target)
            folder = PACKAGE / _layer(target)  # a module of the package is itself part of it
            missing = [n for n in names if n not in package.__all__ and not (folder / f"{n}.py").is_file()
                       and not (folder / n / "__init__.py").is_file()]
            assert not missing, f"{here} imports {missing} of {target}, whose __init__ does not export them"
    assert deep == []


def test_no_exported_name_is_hidden_by_a_module_of_the_same_name():
    import importlib

    for init in PACKAGE.glob("*/__init__.py"):
        package = importlib.import_module(module_name(init, PACKAGE))
        for name in getattr(package, "__all__", ()):
            assert not (init.parent / f"{name}.py").is_file(), f"{package.__name__}.{name} is also a module"
            value = getattr(package, name)
            assert not isinstance(value, type(ast)) or name.endswith("_terms"), f"{package.__name__}.{name}"


def test_the_top_holds_only_the_public_api_and_packages():
    assert sorted(p.name for p in PACKAGE.glob("*.py")) == ["__init__.py", "strategies.py"]


def _lint_imports() -> str:
    found = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or shutil.which("lint-imports")
    if found is None:
        pytest.skip("import-linter is not installed (pip install -e '.[test]' installs it)")
    return found


def _run_lint(lint: str, root: Path) -> subprocess.CompletedProcess:
    """lint-imports on the package under ``root``, with the contracts of its pyproject.toml."""
    env = {"PATH": str(Path(sys.executable).parent), "PYTHONPATH": str(root), "COLUMNS": "1000"}
    return subprocess.run([lint, "--no-cache"], cwd=root, capture_output=True, text=True, env=env, timeout=300)


def test_the_layers_contract_holds():
    done = _run_lint(_lint_imports(), ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert ", 0 broken" in done.stdout and "BROKEN" not in done.stdout


def _planted(tmp_path: Path, module: str, statement: str) -> subprocess.CompletedProcess:
    """lint-imports on a copy of the package whose ``module`` (a path under it) makes one more import,
    deferred inside a function as a careless fix would."""
    lint = _lint_imports()
    copy = tmp_path / PACKAGE.name
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__", "data"))
    target = copy / module
    target.write_text(target.read_text(encoding="utf-8") + f"\n\ndef _late():\n    {statement}\n")
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    return _run_lint(lint, tmp_path)


def test_an_upward_import_breaks_the_layers_contract(tmp_path):
    done = _planted(tmp_path, "precision/metrics.py", "from ..replay import runner")
    assert done.returncode != 0
    assert "pytest_npuprecision.precision is not allowed to import pytest_npuprecision.replay" in done.stdout


# One import at each of the code's real floors, which the layers alone allowed before issue 51.
FLOORS = {
    "dump -> precision": ("dump/locations.py", "from ..precision import metrics",
                          "the floors: dump, bounds, backends and config import only common"),
    # siblings on one floor: the layers contract keeps them apart
    "backends -> dump": ("backends/base.py", "from ..dump import entries", "layers, top to bottom"),
    "bounds -> precision": ("bounds/op_arguments.py", "from ..precision import metrics",
                            "the floors: dump, bounds, backends and config import only common"),
    "pytest in precision": ("precision/metrics.py", "import pytest", "pytest only in the pytest layer"),
    "hypothesis in checks": ("checks/error_data.py", "import hypothesis", "hypothesis only in the op cases"),
}


@pytest.mark.parametrize("floor", sorted(FLOORS))
def test_an_import_below_a_floor_breaks_its_contract(tmp_path, floor):
    module, statement, contract = FLOORS[floor]
    done = _planted(tmp_path, module, statement)
    assert done.returncode != 0, done.stdout
    assert contract in done.stdout.split("Broken contracts")[-1], done.stdout

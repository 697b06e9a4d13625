"""The house as its imports draw it (issue 29): layers enforced by import-linter, no import
circle between modules, no module over 600 lines, and docs/ARCHITECTURE.md's layer picture the
one the contract enforces.

Structural, not timed. The import graph is grimp's (import-linter's own engine), built from the
source, with imports under ``if TYPE_CHECKING:`` left out as the contract leaves them out; an
import inside a function is an arrow like any other.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import grimp
import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "alpstore"
LINT_IMPORTS = str(Path(sys.executable).with_name("lint-imports"))
MAX_LINES = 600


def _importlinter() -> dict:  # type: ignore[type-arg]
    with open(REPO / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["tool"]["importlinter"]


def _layers_contract() -> dict:  # type: ignore[type-arg]
    contracts = [c for c in _importlinter()["contracts"] if c["type"] == "layers"]
    assert len(contracts) == 1, "one layers contract, from the adapters down to the kernel"
    return contracts[0]


def _graph() -> grimp.ImportGraph:
    return grimp.build_graph("alpstore", exclude_type_checking_imports=True, cache_dir=None)


def test_lint_imports_passes() -> None:
    proc = subprocess.run(
        [LINT_IMPORTS, "--no-cache"], cwd=REPO, capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "0 broken" in proc.stdout


def _lint_copy(tmp_path: Path, module: str, line: str) -> subprocess.CompletedProcess[str]:
    """lint-imports on a copy of the package with ``line`` added to ``module``'s source."""
    shutil.copytree(PACKAGE, tmp_path / "alpstore", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    target = tmp_path / Path(*module.split(".")).with_suffix(".py")
    if not target.exists():
        target = target.with_suffix("") / "__init__.py"
    target.write_text(target.read_text() + f"\n{line}\n")
    return subprocess.run(
        [LINT_IMPORTS, "--no-cache"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
        check=False,
    )


def test_the_contract_catches_an_upward_import(tmp_path: Path) -> None:
    """The kernel's codec importing the command line is refused, and the message names it."""
    proc = _lint_copy(tmp_path, "alpstore.codec", "import alpstore.cli.main  # upward")
    assert proc.returncode != 0, proc.stdout
    assert "alpstore.codec -> alpstore.cli.main" in proc.stdout


def test_the_contract_catches_a_lazy_upward_import(tmp_path: Path) -> None:
    """An import inside a function is an arrow too."""
    proc = _lint_copy(
        tmp_path,
        "alpstore.views",
        "def _late() -> None:\n    from alpstore.store import Store  # noqa: F401",
    )
    assert proc.returncode != 0, proc.stdout
    assert "alpstore.views -> alpstore.store" in proc.stdout


def test_the_contract_catches_a_feature_importing_another(tmp_path: Path) -> None:
    proc = _lint_copy(tmp_path, "alpstore.maintenance", "import alpstore.debug  # sideways")
    assert proc.returncode != 0, proc.stdout
    assert "alpstore.maintenance -> alpstore.debug" in proc.stdout


def test_every_module_is_in_a_layer() -> None:
    """A new top-level module or package must be given a layer (the contract is exhaustive)."""
    contract = _layers_contract()
    named = {
        name.strip()
        for layer in contract["layers"]
        for name in re.split(r"[|:]", layer)
        if name.strip()
    }
    top = {
        p.stem if p.suffix == ".py" else p.name
        for p in PACKAGE.iterdir()
        if (p.suffix == ".py" and p.name != "__init__.py")
        or (p.is_dir() and (p / "__init__.py").exists())
    }
    assert contract.get("exhaustive") is True
    assert top == named, (sorted(top - named), sorted(named - top))


def _cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for start in sorted(graph.modules):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.find_modules_directly_imported_by(start))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in graph.modules:
                    continue
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append(
                        (child, iter(sorted(graph.find_modules_directly_imported_by(child))))
                    )
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def _package_faces(graph: grimp.ImportGraph) -> set[str]:
    """Packages whose ``__init__`` only re-exports: an arrow into a package face and back out of
    one of its modules is not a circle between modules."""
    return {m for m in graph.modules if (PACKAGE.parent / Path(*m.split("."))).is_dir()}


def test_no_import_circle_between_modules() -> None:
    graph = _graph()
    for face in _package_faces(graph):
        # a package's __init__ importing its own submodules is how a face re-exports; the
        # circle that matters is between the modules themselves
        for child in list(graph.find_modules_directly_imported_by(face)):
            if child.startswith(face + "."):
                graph.remove_import(importer=face, imported=child)
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = grimp.ImportGraph()
    for m in ("p", "p.a", "p.b", "p.c"):
        graph.add_module(m)
    graph.add_import(importer="p.a", imported="p.b")
    graph.add_import(importer="p.b", imported="p.c")
    graph.add_import(importer="p.c", imported="p.a")
    assert _cycles(graph) == [["p.a", "p.b", "p.c"]]


@pytest.mark.parametrize(
    "path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(REPO))
)
def test_no_module_over_600_lines(path: Path) -> None:
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_LINES, f"{path.relative_to(REPO)} has {lines} lines"


def _documented_layers() -> list[str]:
    text = (REPO / "docs" / "ARCHITECTURE.md").read_text()
    block = re.search(r"<!-- layers: begin -->\n```\n(.*?)```\n<!-- layers: end -->", text, re.S)
    assert block, "docs/ARCHITECTURE.md opens with the layer picture between the layers marks"
    layers = []
    for line in block.group(1).splitlines():
        if not line.strip() or line[0].isspace() or line.startswith(("│", "#")):
            continue  # a layer's line starts at the margin; what it holds may go on below
        names = line.split("  ")[0].strip()  # the layer, then two spaces and what it holds
        layers.append(" | ".join(n.strip() for n in names.split("|")))
    return layers


def test_architecture_md_draws_the_enforced_layers() -> None:
    enforced = [
        " | ".join(f"alpstore.{n.strip()}" for n in layer.split("|"))
        for layer in _layers_contract()["layers"]
    ]
    assert _documented_layers() == enforced


def test_each_package_says_what_lives_there_and_what_it_may_import() -> None:
    for init in sorted(PACKAGE.rglob("__init__.py")):
        if init.parent == PACKAGE:
            continue
        text = init.read_text()
        doc = re.match(r'\s*(?:#.*\n)*\s*"""(.*?)"""', text, re.S)
        assert doc, f"{init.relative_to(REPO)} has no docstring"
        assert "import" in doc.group(1), f"{init.relative_to(REPO)}: say what it may import"

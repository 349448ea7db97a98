"""No import circles between the repository's own modules.

Every .py file under packages/*/src/ is parsed with `ast` (nothing is imported) and each import
becomes an edge between two of the repository's modules: module-level and function-level imports
alike, since a deferred import still ties the two modules together; imports under
`if TYPE_CHECKING:` are left out because they never run. `from pkg import name` points at the
module `pkg.name` when that is a module of its own, else at `pkg`. Importing `a.b.c` also runs
`a/__init__.py` and `a/b/__init__.py`, but those implicit edges are not added: every submodule would
otherwise form a circle with a package that re-exports it.

A circle is reported as a chain `a -> b -> c -> a`, one per strongly connected component member
(the shortest circle through it), so a tangle of several circles shows each of them.
"""

from __future__ import annotations

import ast
from collections import deque
from collections.abc import Iterable, Mapping
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

Graph = Mapping[str, set[str]]


def module_files(src_roots: Iterable[Path]) -> dict[str, Path]:
    """Module name -> file for every .py file under the given src/ folders."""
    modules: dict[str, Path] = {}
    for root in src_roots:
        for path in sorted(root.rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST) -> Iterable[ast.Import | ast.ImportFrom]:
    """Every import statement at any depth, except those in the body of `if TYPE_CHECKING:`."""
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
        else:
            stack.extend(ast.iter_child_nodes(node))


def imported_modules(module: str, path: Path, modules: Mapping[str, Path]) -> set[str]:
    """The repository modules that `module` (stored at `path`) imports."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    targets: set[str] = set()
    for node in _imports(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
            continue
        base = node.module or ""
        if node.level:
            anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
            base = ".".join([*anchor, base] if base else anchor)
        for alias in node.names:
            submodule = f"{base}.{alias.name}"
            targets.add(submodule if submodule in modules else base)
    return {target for target in targets if target in modules and target != module}


def import_graph(modules: Mapping[str, Path]) -> dict[str, set[str]]:
    return {module: imported_modules(module, path, modules) for module, path in modules.items()}


def strongly_connected(graph: Graph) -> list[list[str]]:
    """Tarjan's components with more than one module, iterative (no recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(sorted(component))
    return components


def shortest_cycle_through(start: str, graph: Graph, within: set[str]) -> list[str]:
    """Breadth-first from `start` back to itself inside one component: [start, ..., start]."""
    parent: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for child in sorted(graph.get(node, ())):
            if child not in within:
                continue
            if child == start:
                chain = [node]
                while chain[-1] != start:
                    chain.append(parent[chain[-1]])
                return [*reversed(chain), start]
            if child not in parent:
                parent[child] = node
                queue.append(child)
    raise AssertionError(f"{start} is in a component but on no cycle")


def find_cycles(graph: Graph) -> list[list[str]]:
    """The shortest cycle through each module on any cycle, each cycle once, rotated to start at
    its smallest name."""
    cycles: set[tuple[str, ...]] = set()
    for component in strongly_connected(graph):
        for module in component:
            ring = shortest_cycle_through(module, graph, set(component))[:-1]
            first = ring.index(min(ring))
            rotated = ring[first:] + ring[:first]
            cycles.add((*rotated, rotated[0]))
    return [list(cycle) for cycle in sorted(cycles)]


def test_the_cycle_finder_reports_each_circle_and_nothing_else() -> None:
    graph = {
        "a": {"b"}, "b": {"c"}, "c": {"a", "d"},  # a -> b -> c -> a
        "d": {"e"}, "e": {"d"},  # d <-> e, reachable from the first circle but separate
        "f": {"a", "g"}, "g": set(),  # f and g are on no circle
    }
    assert find_cycles(graph) == [["a", "b", "c", "a"], ["d", "e", "d"]]
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_two_circles_sharing_a_module_are_both_reported() -> None:
    graph = {"hub": {"x", "y"}, "x": {"hub"}, "y": {"hub"}}
    assert find_cycles(graph) == [["hub", "x", "hub"], ["hub", "y", "hub"]]


def test_imports_resolve_relative_names_submodules_and_skip_type_checking(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("from .sub import helper\n")
    (package / "sub" / "__init__.py").write_text("")
    (package / "sub" / "helper.py").write_text("from .. import base\nfrom ..base import NAME\n")
    (package / "base.py").write_text(
        "from typing import TYPE_CHECKING\nimport os\n"
        "if TYPE_CHECKING:\n    from pkg.sub import helper\nelse:\n    import pkg.other\n"
        "def late():\n    from pkg.sub.helper import thing\n")
    (package / "other.py").write_text("import pkg.sub\n")
    graph = import_graph(module_files([tmp_path]))
    assert graph == {
        "pkg": {"pkg.sub.helper"},
        "pkg.sub": set(),
        "pkg.sub.helper": {"pkg.base"},
        "pkg.base": {"pkg.other", "pkg.sub.helper"},  # the function-level import counts
        "pkg.other": {"pkg.sub"},
    }
    assert find_cycles(graph) == [["pkg.base", "pkg.sub.helper", "pkg.base"]]


def test_the_packages_import_each_other_without_circles() -> None:
    graph = import_graph(module_files(sorted(REPO.glob("packages/*/src"))))
    assert len(graph) > 100, "the packages' sources were not found"
    cycles = find_cycles(graph)
    assert not cycles, "import circles between the repository's modules:\n" + "\n".join(
        " -> ".join(cycle) for cycle in cycles)

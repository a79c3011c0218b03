"""The import graph of a package, read from its source with Python's ast (nothing is imported).

  python scripts/import_graph.py [--root DIR] [--check] [PACKAGE] [PREFIX ...]

  python scripts/import_graph.py calibrate calibrate.runs calibrate.cli calibrate.export
  python scripts/import_graph.py --check calibrate      # what ./scripts/test runs

Edges are every `import` / `from ... import` of the package's own modules, at module level or
inside a function (the latter marked `*`); a `from pkg import name` naming a submodule counts as
an import of that submodule.  Prints the edges from or to modules starting with a PREFIX (all
when none is given), every private name (`_x`) one module imports from another, and every cycle
(strongly connected component of more than one module) of the whole graph.  Exits 1 when there
is a cycle or a private import, so it guards the test run (`--check`: print only those).
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path


def modules_of(root: Path, package: str) -> dict[str, Path]:
    modules = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


def graph_of(modules: dict[str, Path], package: str
             ) -> tuple[dict[tuple[str, str], bool], list[str]]:
    """{(importer, imported): only inside functions?}, and the private imports."""
    def resolve(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    edges: dict[tuple[str, str], bool] = {}
    private: list[str] = []
    for mod, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        top = {id(node) for node in tree.body}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = mod.split(".") if path.name == "__init__.py" else mod.split(".")[:-1]
                    anchor = anchor[: len(anchor) - (node.level - 1)]
                    base = ".".join(anchor + ([base] if base else []))
                names = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base
                         for a in node.names]
                if base.startswith(package):
                    private += [f"{mod} imports {base}.{a.name}" for a in node.names
                                if a.name.startswith("_") and not a.name.startswith("__")]
            else:
                continue
            for name in names:
                target = resolve(name)
                if target and target != mod:
                    edges[(mod, target)] = edges.get((mod, target), True) and id(node) not in top
    return edges, private


def cycles_of(modules: dict[str, Path], edges: dict[tuple[str, str], bool]) -> list[list[str]]:
    """Tarjan's strongly connected components of more than one module."""
    succ = {m: sorted(b for (a, b) in edges if a == m) for m in modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in succ[v]:
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
                found.append(sorted(comp))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(modules) + 100))
    for m in modules:
        if m not in index:
            visit(m)
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent)
    parser.add_argument("--check", action="store_true",
                        help="print only the private imports and the cycles, not the edges")
    parser.add_argument("package", nargs="?", default="calibrate")
    parser.add_argument("prefixes", nargs="*")
    args = parser.parse_args()
    modules = modules_of(args.root, args.package)
    edges, private = graph_of(modules, args.package)
    prefixes = args.prefixes or [args.package]
    for (a, b), local in sorted(edges.items()):
        if not args.check and any(m == p or m.startswith(p + ".") for m in (a, b) for p in prefixes):
            print(f"{a} -> {b}{'  *' if local else ''}")
    print("private names imported across modules:" + ("" if private else " none"))
    for line in private:
        print(f"  {line}")
    cycles = cycles_of(modules, edges)
    print("cycles:" + ("" if cycles else " none"))
    for comp in cycles:
        print("  " + " <-> ".join(comp))
    return 1 if cycles or private else 0


if __name__ == "__main__":
    sys.exit(main())

"""The host's shape (issue 19): no function over 60 lines, no ``_private`` name of one muxhost module
used in another, no import circle among muxhost modules (function-local imports too), and each
module's first docstring line says its job. Source parsed with ``ast``: in-process and quick."""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "muxhost"
MAX_LINES = 60


def shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else path.name


def modules(root: Path = PACKAGE) -> dict[str, Path]:
    """Every module of the package under ``root``, by dotted name (a package by its own name)."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def long_functions(path: Path, limit: int = MAX_LINES) -> list[str]:
    """``name (N lines)`` of every function or method of ``path`` longer than ``limit`` lines
    (decorators and docstring included)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            start = min([d.lineno for d in node.decorator_list] + [node.lineno])
            if node.end_lineno - start + 1 > limit:
                found.append(f"{shown(path)}:{node.lineno} {node.name} ({node.end_lineno - start + 1} lines)")
    return found


def imports(name: str, path: Path, known: dict[str, Path]) -> list[tuple[int, str, str | None]]:
    """(line, module, imported name or None) of each import of a muxhost module in ``path`` at any
    depth, except under ``if TYPE_CHECKING:`` (never run); ``from a import b`` where ``a.b`` is a
    module counts as an import of ``a.b``."""
    tree = ast.parse(path.read_text(), str(path))
    typing_only = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If) and getattr(node.test, "id", "") ==
                   "TYPE_CHECKING" for sub in node.body for n in ast.walk(sub)}
    out: list[tuple[int, str, str | None]] = []
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name, None) for a in node.names if a.name in known]
        elif isinstance(node, ast.ImportFrom):
            base = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
            source = node.module if not node.level else ".".join(
                base[:len(base) - node.level + 1] + ([node.module] if node.module else []))
            for a in node.names:
                if f"{source}.{a.name}" in known:
                    out.append((node.lineno, f"{source}.{a.name}", None))
                elif source in known:
                    out.append((node.lineno, source, a.name))
    return out


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected parts of more than one module (Tarjan's algorithm, iteratively)."""
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
            v, edges = work[-1]
            w = next(edges, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                part = []
                while True:
                    w = stack.pop()
                    part.append(w)
                    if w == v:
                        break
                if len(part) > 1:
                    found.append(sorted(part))
    return found


def test_no_function_of_the_host_is_over_60_lines():
    host = {n: p for n, p in modules().items() if not n.startswith("muxhost.testing")}
    long = [f for p in host.values() for f in long_functions(p)]
    assert not long, "split these (no function over 60 lines in the host):\n" + "\n".join(long)


def private_uses(known: dict[str, Path]) -> list[str]:
    """Each ``from m import _x`` and ``m._x`` (``m`` imported under any name) in one of ``known``'s
    modules where ``m`` is another of them."""
    used = [f"{shown(path)}:{line}: {source}.{what}" for name, path in known.items() for line, source, what in imports(name, path, known)
            if what and what.startswith("_") and not what.startswith("__") and source != name]
    for name, path in known.items():
        tree = ast.parse(path.read_text(), str(path))
        aliases = {a.asname or a.name: f"{node.module}.{a.name}" if isinstance(node, ast.ImportFrom) else a.name
                   for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom)) and
                   (isinstance(node, ast.Import) or node.level == 0) for a in node.names}
        used += [f"{shown(path)}:{node.lineno}: {ast.unparse(node)}" for node in ast.walk(tree)
                 if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
                 and isinstance(node.value, ast.Name) and aliases.get(node.value.id, name) in known
                 and aliases.get(node.value.id, name) != name]
    return used


def test_no_private_name_of_a_muxhost_module_is_used_in_another():
    used = private_uses(modules())
    assert not used, "a _private name used across modules:\n" + "\n".join(used)


def test_no_import_circle_among_muxhost_modules():
    known = modules()
    graph = {name: {m for _line, m, _what in imports(name, path, known) if m != name} for name, path in known.items()}
    found = circles(graph)
    assert not found, "import circles (function-local imports count):\n" + "\n".join(" -> ".join(c) for c in found)


def test_the_checks_see_what_they_look_for(tmp_path):
    pkg = tmp_path / "muxhost"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text('"""Pkg."""\n')
    (pkg / "a.py").write_text('"""A."""\nfrom typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from muxhost import b\n'
                              "def f():\n    from muxhost.sub import c\n    return c._x\n")
    (pkg / "b.py").write_text('"""B."""\nfrom muxhost.sub.c import _y\n' + "def g():\n" + "    pass\n" * 60)
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "c.py").write_text("from .. import a\n")
    known = modules(pkg)
    assert sorted(known) == ["muxhost", "muxhost.a", "muxhost.b", "muxhost.sub", "muxhost.sub.c"]
    assert imports("muxhost.a", known["muxhost.a"], known) == [(6, "muxhost.sub.c", None)]  # not the typing one
    assert imports("muxhost.b", known["muxhost.b"], known) == [(2, "muxhost.sub.c", "_y")]
    assert imports("muxhost.sub.c", known["muxhost.sub.c"], known) == [(1, "muxhost.a", None)]
    graph = {n: {m for _l, m, _w in imports(n, p, known)} for n, p in known.items()}
    assert circles(graph) == [["muxhost.a", "muxhost.sub.c"]]
    assert [f.split()[1] for f in long_functions(known["muxhost.b"])] == ["g"]
    assert not long_functions(known["muxhost.a"])
    assert [u.split(": ")[1] for u in private_uses(known)] == ["muxhost.sub.c._y", "c._x"]


def test_every_module_says_its_job_on_its_first_line():
    silent = [str(p.relative_to(ROOT)) for p in modules().values()
              if not (ast.get_docstring(ast.parse(p.read_text())) or "").strip()]
    assert not silent, "modules without a docstring whose first line says their job:\n" + "\n".join(silent)

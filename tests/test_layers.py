"""The package layering of docs/architecture.md, read from the source: the
compiler never imports the device library, the backends neither of them
(but the binder's records and FastLaunch), the IR nothing above it, and no
module of the compiler, the device library or the IR imports inside a
function."""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "moye"


def _module(path):
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = list(rel.parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path):
    """(imported moye module, at module level?) for each import in `path`."""
    tree = ast.parse(path.read_text())
    top = {id(n) for n in tree.body}
    package = _module(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = ".".join(package[:len(package) - node.level + 1] +
                                ([node.module] if node.module else []))
            else:
                base = node.module or ""
            targets = [f"{base}.{a.name}" for a in node.names] if not node.module else [base]
        elif isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        else:
            continue
        for t in targets:
            if t.startswith("moye"):
                out.append((t, id(node) in top))
    return out


def _files(package):
    return sorted((ROOT / package).rglob("*.py"))


def _edges(package):
    return [(str(p.relative_to(ROOT.parent)), t, top) for p in _files(package)
            for t, top in _imports(p)]


@pytest.mark.parametrize("package, forbidden", [
    ("compiler", ("moye.device", "moye.backend", "moye.examples")),
    ("ir", ("moye.compiler", "moye.device", "moye.backend", "moye.array", "moye.atom",
            "moye.tiled")),
    ("device", ("moye.backend", "moye.compiler.frontend", "moye.compiler.dispatch")),
    ("backend", ("moye.device", "moye.compiler.frontend", "moye.compiler.dispatch",
                 "moye.compiler.tracer", "moye.compiler.identity", "moye.compiler.control")),
    ("ops", ("moye.backend", "moye.examples", "moye.compiler.frontend", "moye.compiler.dispatch")),
])
def test_imports_point_down(package, forbidden):
    bad = [(f, t) for f, t, _ in _edges(package) if t.startswith(forbidden)]
    assert not bad, f"moye/{package} imports what sits above it: {bad}"


@pytest.mark.parametrize("package", ["layout", "array", "ir", "compiler", "device", "backend"])
def test_nothing_below_imports_ops(package):
    bad = [(f, t) for f, t, _ in _edges(package) if t.startswith("moye.ops")]
    assert not bad, f"moye/{package} imports moye.ops, which sits above it: {bad}"


@pytest.mark.parametrize("package", ["compiler", "device", "ir"])
def test_no_imports_inside_functions(package):
    hidden = [(f, t) for f, t, top in _edges(package) if not top]
    assert not hidden, f"imports inside functions in moye/{package}: {hidden}"


def test_the_checker_sees_an_upward_import(tmp_path):
    """The checker itself: a module importing upward, inside a function."""
    bad = tmp_path / "moye" / "compiler" / "x.py"
    bad.parent.mkdir(parents=True)
    bad.write_text("def f():\n    from ..device import atoms\n")
    global ROOT
    saved, ROOT = ROOT, tmp_path / "moye"
    try:
        assert _imports(bad) == [("moye.device", False)]
    finally:
        ROOT = saved

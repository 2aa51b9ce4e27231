"""The house rule, as a test: one package per layer, a module imports only from its own package
or a lower layer, roles never import each other, protocol/ is standard-library only.

Usage:
    pytest tests/test_layers.py
    python tests/test_layers.py          # prints every import that breaks a rule, every module the docs miss

Every import counts, at module level or inside a function (deferring an import does not remove
the dependency). An import inside a function is allowed only where it defers something heavy
(torch, transformers, DVC, ...: the imported woolf module loads one at import time), and it says
so with a `# deferred: <what>` comment on its line; only cli/ defers light modules (so that
`woolf --help` loads no library code). docs/architecture.md names every module.
"""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "woolf"

# woolf.<first component> -> layer; same layer and not the same package: never allowed
LAYERS = {
    "errors": 0, "timing": 0, "interrupts": 0, "_version": 0,
    "git": 1,
    "protocol": 2,
    "core": 3,
    "storage": 4,
    "forges": 5, "workloads": 5,
    "ledger": 6,
    "participant": 7, "validator": 7, "audit": 7, "hub": 7, "history": 7, "report": 7,
    "demo": 8,
    "cli": 9,
}
FACADES = {"woolf", "woolf.__main__"}  # the package's public face and `python -m woolf`: above every layer
HEAVY = ("torch", "transformers", "tokenizers", "dvc", "dvc_data", "dvc_objects", "requests",
         "numpy", "matplotlib", "openskill", "safetensors", "scmrepo", "rich", "yaml", "peft", "s3fs",
         "bitsandbytes")
STDLIB_ONLY = ("woolf.protocol", "woolf.git", "woolf.errors", "woolf._version")


@dataclass(frozen=True)
class Import:
    module: str  # the importing module, dotted
    target: str  # the imported module (or module.name), dotted
    line: int
    deferred: bool  # inside a function


def module_name(path: Path, package: Path = PACKAGE) -> str:
    rel = path.relative_to(package.parent).with_suffix("")
    return ".".join(rel.parts).removesuffix(".__init__")


def imports_of(path: Path, package: Path = PACKAGE) -> list[Import]:
    mod = module_name(path, package)
    pkg = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
    found: list[Import] = []

    def visit(node: ast.AST, deferred: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = deferred or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                found.extend(Import(mod, a.name, child.lineno, deferred) for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = pkg.split(".")[: len(pkg.split(".")) - (child.level - 1)]
                    full = ".".join(base + ([child.module] if child.module else []))
                else:
                    full = child.module or ""
                found.append(Import(mod, full, child.lineno, deferred))
                found.extend(Import(mod, f"{full}.{a.name}", child.lineno, deferred) for a in child.names)
            visit(child, inner)

    visit(ast.parse(path.read_text(), str(path)), False)
    return found


def all_imports(package: Path = PACKAGE) -> list[Import]:
    return [i for f in sorted(package.rglob("*.py")) for i in imports_of(f, package)]


def package_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "woolf" and len(parts) > 1 else None


def existing(target: str, package: Path = PACKAGE) -> str | None:
    """The woolf module a dotted target names (`woolf.a.b.name` -> `woolf.a.b`), or None."""
    parts = target.split(".")
    while parts:
        p = package.parent.joinpath(*parts)
        if p.with_suffix(".py").is_file() or (p / "__init__.py").is_file():
            return ".".join(parts)
        parts.pop()
    return None


def layer_violations(imports: list[Import]) -> list[str]:
    out = []
    for i in imports:
        if i.module in FACADES or not i.target.startswith("woolf."):
            continue
        src, dst = package_of(i.module), package_of(i.target)
        if dst is None or src == dst or existing(i.target) in (None, "woolf"):
            continue
        if src not in LAYERS or dst not in LAYERS:
            out.append(f"{i.module}:{i.line}: {src or dst} is in no layer (add it to LAYERS)")
        elif LAYERS[dst] >= LAYERS[src]:
            why = "another role" if LAYERS[dst] == LAYERS[src] == 7 else (
                "the same layer" if LAYERS[dst] == LAYERS[src] else "a higher layer")
            out.append(f"{i.module}:{i.line} imports {i.target}: {dst} is {why} "
                       f"(L{LAYERS[dst]} from L{LAYERS[src]})")
    return out


def heavy_libraries(imports: list[Import]) -> dict[str, set[str]]:
    """woolf module -> the heavy libraries it loads at import time, directly or through another."""
    eager: dict[str, set[str]] = {}
    libs: dict[str, set[str]] = {}
    for i in imports:
        if i.deferred:
            continue
        top = i.target.split(".")[0]
        if top in HEAVY:
            libs.setdefault(i.module, set()).add(top)
        elif i.target.startswith("woolf.") and (t := existing(i.target)):
            eager.setdefault(i.module, set()).add(t)
            # importing a submodule runs its packages' __init__ too
            eager[i.module].update(".".join(t.split(".")[:n]) for n in range(2, t.count(".") + 1))
    changed = True
    while changed:
        changed = False
        for mod, targets in eager.items():
            for t in targets:
                new = libs.get(t, set()) - libs.get(mod, set())
                if new:
                    libs.setdefault(mod, set()).update(new)
                    changed = True
    return libs


def heavy_modules(imports: list[Import]) -> set[str]:
    """woolf modules that load a heavy library at import time, directly or through another."""
    return {m for m, found in heavy_libraries(imports).items() if found}


def _says_why(module: str, line: int, package: Path = PACKAGE) -> bool:
    """An import inside a function says why it waits: `# deferred: <reason>` on its (first) line."""
    path = package.parent / (module.replace(".", "/") + ".py")
    if not path.is_file():
        path = package.parent / module.replace(".", "/") / "__init__.py"
    return "# deferred:" in path.read_text().splitlines()[line - 1]


def needless_deferrals(imports: list[Import], package: Path = PACKAGE) -> list[str]:
    """Imports inside functions that break the rule: every one says why (`# deferred: ...`), and
    what it defers is heavy (a woolf module that loads torch, DVC, ... at import time, or such a
    library itself); only the CLI defers light modules, so that `woolf --help` loads no library."""
    libs = heavy_libraries(imports)
    heavy = {m for m, found in libs.items() if found}
    statements: dict[tuple[str, int], list[str]] = {}
    for i in imports:
        if i.deferred and i.module not in FACADES:
            statements.setdefault((i.module, i.line), []).append(i.target)
    out = []
    for (mod, line), targets in sorted(statements.items()):
        if not _says_why(mod, line, package):
            out.append(f"{mod}:{line} imports {max(targets, key=len)} inside a function without saying "
                       "why: add `# deferred: <what it defers>` or import it at the top")
            continue
        resolved = {existing(t, package) for t in targets} - {None}
        third_party_heavy = any(t.split(".")[0] in HEAVY for t in targets)
        if not third_party_heavy and not resolved & heavy and package_of(mod) != "cli":
            out.append(f"{mod}:{line} imports {max(targets, key=len)} inside a function, "
                       f"but it loads nothing heavy: import it at the top")
            continue
        deferred = {t.split(".")[0] for t in targets if t.split(".")[0] in HEAVY}
        for r in resolved:
            deferred |= libs.get(r, set())
        if deferred and deferred <= libs.get(mod, set()):
            out.append(f"{mod}:{line} imports {max(targets, key=len)} inside a function, but {mod} "
                       f"loads {', '.join(sorted(deferred))} at import time already: import it at the top")
    return out


def package_cycles(imports: list[Import]) -> list[list[str]]:
    edges: dict[str, set[str]] = {}
    for i in imports:
        src, dst = package_of(i.module), package_of(i.target)
        if src and dst and src != dst and existing(i.target) not in (None, "woolf") and i.module not in FACADES:
            edges.setdefault(src, set()).add(dst)
    cycles, seen = [], set()

    def walk(node, path):
        for nxt in sorted(edges.get(node, ())):
            if nxt in path:
                cyc = path[path.index(nxt):]
                key = frozenset(cyc)
                if key not in seen:
                    seen.add(key)
                    cycles.append(cyc + [nxt])
            elif len(path) < 20:
                walk(nxt, path + [nxt])

    for start in sorted(edges):
        walk(start, [start])
    return cycles


def private_reads(package: Path = PACKAGE) -> list[str]:
    """Where a module reads another woolf module's private member (a leading underscore): imported
    by name (`from woolf.a import _x`), or read off a woolf module bound to a name (`a._x`)."""
    out = []
    for path in sorted(package.rglob("*.py")):
        mod, modules = module_name(path, package), set()
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("woolf") and not node.level:
                for a in node.names:
                    if existing(f"{node.module}.{a.name}", package) == f"{node.module}.{a.name}":
                        modules.add(a.asname or a.name)  # a module bound to a name
                    elif a.name.startswith("_") and not a.name.startswith("__") and node.module != mod:
                        out.append(f"{mod}:{node.lineno} imports {node.module}.{a.name}")
            elif isinstance(node, ast.Import):
                modules |= {a.asname for a in node.names if a.asname and a.name.startswith("woolf.")}
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules
                    and node.attr.startswith("_") and not node.attr.startswith("__")):
                out.append(f"{mod}:{node.lineno} reads {node.value.id}.{node.attr}")
    return out


def test_no_module_reads_another_modules_private_members(tmp_path):
    """A name with a leading underscore is its module's own: another module asks for a public one."""
    assert private_reads() == []
    copy = tmp_path / "woolf"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    with (copy / "validator" / "ci.py").open("a") as f:
        f.write("\nfrom woolf.validator.verdict import _x  # a private name\n"
                "from woolf.validator import queue\n\n\ndef _g():\n    return queue._y\n")
    found = private_reads(copy)
    assert any("woolf.validator.ci" in v and "_x" in v for v in found)
    assert any("woolf.validator.ci" in v and "queue._y" in v for v in found)


def test_every_package_is_in_a_layer():
    top = {p.stem if p.is_file() else p.name for p in PACKAGE.iterdir()
           if (p.suffix == ".py" or (p / "__init__.py").is_file())}
    assert top - LAYERS.keys() - {"__init__", "__main__"} == set()
    modules = [p for p in PACKAGE.glob("*.py") if p.stem not in ("__init__", "__main__")]
    assert len(modules) <= 6, f"{len(modules)} modules at woolf/'s top level: {sorted(p.name for p in modules)}"


def test_a_module_imports_only_its_own_package_or_a_lower_layer():
    assert layer_violations(all_imports()) == []


def test_no_import_circle_between_packages():
    assert package_cycles(all_imports()) == []


def test_imports_inside_functions_only_defer_something_heavy():
    assert needless_deferrals(all_imports()) == []


def test_the_rule_fails_on_a_violation(tmp_path):
    """The checker itself, on a copy of the package with deliberate breaks: a lower layer importing
    a higher one (at the top and inside a function), one role importing another, a package circle."""
    copy = tmp_path / "woolf"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    with (copy / "core" / "merge.py").open("a") as f:
        f.write("\nfrom woolf.ledger.ledger import Ledger  # L3 -> L6\n\n\ndef _f():\n"
                "    from woolf.storage.weights import load_checked  # L3 -> L4, deferred\n")
    with (copy / "validator" / "verdict.py").open("a") as f:
        f.write("\nfrom woolf.participant import submit  # role -> role\n")
    found = layer_violations(all_imports(copy))
    assert any("woolf.core.merge" in v and "woolf.ledger.ledger" in v and "higher layer" in v for v in found)
    assert any("woolf.core.merge" in v and "woolf.storage.weights" in v for v in found)
    assert any("woolf.validator.verdict" in v and "another role" in v for v in found)
    assert layer_violations(all_imports(PACKAGE)) == []  # the real tree is clean
    assert package_cycles([Import("woolf.git.repo", "woolf.protocol.layout", 1, False),
                           Import("woolf.protocol.layout", "woolf.git.repo", 1, True)]) != []


def test_the_hooks_closure_is_standard_library_only():
    """`python -S` (no site-packages, as the installed hook runs) imports the hook and every
    stdlib-only package; what the hook loads is protocol/, git/ and errors alone."""
    code = (
        f"import sys, importlib, pkgutil; sys.path.insert(0, {str(ROOT)!r})\n"
        "import woolf.hub.hook\n"
        "loaded = sorted(m for m in sys.modules if m.startswith('woolf'))\n"
        "import woolf.protocol, woolf.git\n"
        "for pkg in (woolf.protocol, woolf.git):\n"
        "    for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + '.'):\n"
        "        importlib.import_module(m.name)\n"
        "print(' '.join(loaded))\n"
    )
    out = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    loaded = out.stdout.split()
    allowed = STDLIB_ONLY + ("woolf.hub",)
    assert [m for m in loaded if m != "woolf" and not m.startswith(allowed)] == []
    assert "woolf.protocol.rules.push" in loaded


def unnamed_modules(doc: str, package: Path = PACKAGE) -> list[str]:
    """Modules docs/architecture.md does not name: each by its file name in its top package's part (the `### `
    heading or the `- `pkg/`:` bullet that names it; a subpackage as `sub/`), or by its path anywhere."""
    parts: dict[str, str] = {}
    for section in re.split(r"(?m)^### ", doc)[1:]:
        head = section.splitlines()[0]
        for pkg in re.findall(r"`(\w+)/`", head) + (["."] if "woolf/*.py" in head else []):
            parts[pkg] = parts.get(pkg, "") + section
        for bullet in re.split(r"(?m)^- ", section)[1:]:
            if m := re.match(r"`(\w+)/`:", bullet):
                parts[m.group(1)] = parts.get(m.group(1), "") + bullet
    missing = []
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package)
        if "__pycache__" in rel.parts or rel.as_posix() in ("__init__.py", "__main__.py", "_version.py"):
            continue
        part = parts.get(rel.parts[0] if len(rel.parts) > 1 else ".", "")
        if rel.name == "__init__.py":
            named = len(rel.parts) == 2 or re.search(rf"(?<![\w.]){re.escape(rel.parent.name)}/", part)
        else:
            named = (re.search(rf"(?<![\w/]){re.escape(rel.as_posix())}", doc)
                     or re.search(rf"(?<![\w.]){re.escape(rel.name)}", part))
        if not named:
            missing.append(rel.as_posix())
    return missing


def test_docs_architecture_names_every_module():
    doc = (ROOT / "docs" / "architecture.md").read_text()
    assert unnamed_modules(doc) == [], "say in docs/architecture.md what each of these modules is"
    assert unnamed_modules(doc.replace("`flood.py`", "`flood`")) == ["protocol/rules/flood.py"]  # the check bites


if __name__ == "__main__":
    imports = all_imports()
    for line in layer_violations(imports) + needless_deferrals(imports):
        print(line)
    for cyc in package_cycles(imports):
        print("cycle:", " -> ".join(cyc))
    for module in unnamed_modules((ROOT / "docs" / "architecture.md").read_text()):
        print("not named in docs/architecture.md:", module)

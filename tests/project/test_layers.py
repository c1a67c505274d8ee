"""The package's folders are its layers: each imports only the layers below it, and no modules import each
other in a circle. Every `import` counts, at module level or inside a function."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "verl_prime_lora"

# What each layer may import besides itself; the package root's `__init__` (the logger) is open to all.
ALLOWED = {
    "config": set(),
    "checkpoints": {"config"},
    "algo": {"config"},
    "rewards": set(),
    "run_processes": set(),
    "patching": set(),
    "verl_surface": set(),
    "cpu": {"patching", "run_processes"},
    "checks": {"checkpoints", "config", "rewards"},
    "tools": {"config", "rewards"},
    "preflight": {"checks", "config"},
    "hardening": {"checkpoints", "config", "rewards"},
    "prime": {"algo", "checkpoints", "checks", "config", "hardening", "rewards"},
    "plugin": {"algo", "checkpoints", "checks", "config", "hardening", "patching", "prime", "rewards", "run_processes"},
    "demo": {"algo", "cpu", "rewards", "tools"},
}


def _imports() -> dict[str, set[str]]:
    """module -> the package's modules it imports (`verl_prime_lora.x.y`)."""
    graph = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("verl_prime_lora"):
                targets.add(node.module)
                targets.update(f"{node.module}.{alias.name}" for alias in node.names)
            elif isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names if alias.name.startswith("verl_prime_lora"))
        graph[module] = targets
    return {module: {t for t in targets if t in graph and t != module} for module, targets in graph.items()}


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_each_layer_imports_only_the_layers_below_it():
    wrong = [
        f"{module} -> {target}"
        for module, targets in _imports().items()
        for target in targets
        if _layer(target) not in ALLOWED.get(_layer(module), set()) | {_layer(module), ""}
    ]
    assert not wrong, wrong
    assert {_layer(m) for m in _imports()} - {""} == set(ALLOWED)  # every folder has its rule


def test_no_import_circle():
    graph = _imports()
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for target in sorted(graph[module]):
            if state.get(target) == 1:
                raise AssertionError("import circle: " + " -> ".join(path[path.index(target) :] + [target]))
            if target not in state:
                visit(target, [*path, target])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])


def test_the_package_never_imports_the_lab():
    """`benchmarks/` (the lab) stands above the package: no module of it imports the lab."""
    lab = {path.stem for path in (PACKAGE.parent / "benchmarks").glob("*.py")} | {"benchmarks"}
    found = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            names += [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
            found += [f"{path.name}: {name}" for name in names if name.split(".")[0] in lab]
    assert not found, found

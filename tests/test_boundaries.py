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


def config_modules() -> list[str]:
    """Every ludic_core module that defines a config: a class deriving from `FrozenModel`,
    directly or through classes defined in ludic_core (`AlgorithmBase`, `WeightPush`, ...).
    Found by that rule, so a new config module is guarded without being listed here."""
    bases: dict[str, dict[str, set[str]]] = {}  # module -> class -> its bases' names
    for p in (ROOT / "ludic_core").rglob("*.py"):
        module = ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        tree = ast.parse(p.read_text(), filename=str(p))
        bases[module] = {node.name: {ast.unparse(b).rsplit(".", 1)[-1] for b in node.bases}
                         for node in tree.body if isinstance(node, ast.ClassDef)}
    configs = {"FrozenModel"}
    while grown := {c for classes in bases.values() for c, b in classes.items() if b & configs} - configs:
        configs |= grown
    return sorted(m for m, classes in bases.items() if set(classes) & configs - {"FrozenModel"})


#: torch-free beside the configs: the data types, and packages a config reaches lazily
TORCH_FREE = ["ludic_core.types", "ludic_core.envs", "ludic_core.algorithms", "ludic_core.losses"]


def test_every_config_module_imports_with_torch_blocked():
    modules = config_modules()
    assert {"ludic_core.config", "ludic_core.compose.configs", "ludic_core.stages.spec",
            "ludic_core.vllm.server", "ludic_core.algorithms.grpo"} <= set(modules)  # the rule finds them
    code = (
        "import importlib, sys\n"
        "class NoTorch:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'torch': raise ImportError('torch is blocked: ' + name)\n"
        "sys.meta_path.insert(0, NoTorch())\n"
        f"for m in {modules + TORCH_FREE!r}: importlib.import_module(m)\n"
        "sys.exit(1 if 'torch' in sys.modules else 0)\n"
    )
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert res.returncode == 0, "a config module needs torch: " + res.stderr[-3000:]

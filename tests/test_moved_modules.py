"""Modules moved by issue 56 item 7 keep their old path for one release: importing it warns
with the new path and gives the new module itself (ludic_core.lazy.moved_module)."""

from __future__ import annotations

import importlib
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

#: old path -> new path, for every module item 7 moved
MOVED: dict[str, str] = {
    # the stage runner: its own layer above training
    "ludic_core.training.stage": "ludic_core.stages.run",
    "ludic_core.training.stage_data": "ludic_core.stages.data",
    "ludic_core.training.stage_spec": "ludic_core.stages.spec",
    "ludic_core.training.launch": "ludic_core.stages.launch",
    # tic-tac-toe: an env package like the others (ludic_core.envs.tic_tac_toe is the package now)
    "ludic_core.envs.tic_tac_toe_metrics": "ludic_core.envs.tic_tac_toe.metrics",
    "ludic_core.envs.tic_tac_toe_players": "ludic_core.envs.tic_tac_toe.players",
    "ludic_core.envs.tic_tac_toe_rules": "ludic_core.envs.tic_tac_toe.rules",
    # vLLM: one package above inference and publish
    "ludic_core.inference.vllm_client": "ludic_core.vllm.client",
    "ludic_core.inference.vllm_http": "ludic_core.vllm.http",
    "ludic_core.inference.vllm_preflight": "ludic_core.vllm.preflight",
    "ludic_core.inference.vllm_probe": "ludic_core.vllm.probe",
    "ludic_core.inference.vllm_server": "ludic_core.vllm.server",
    "ludic_core.inference.vllm_setup": "ludic_core.vllm.setup",
    "ludic_core.inference.vllm_plugin": "ludic_core.vllm.plugin",
    "ludic_core.publish.vllm": "ludic_core.vllm.publisher",
    "ludic_core.publish.vllm_adapters": "ludic_core.vllm.adapters",
    "ludic_core.publish.transports": "ludic_core.vllm.transports",
    # LoRA: one low package shared by training, inference and vllm
    "ludic_core.inference.adapter_names": "ludic_core.lora.names",
    "ludic_core.models.adapter_dir": "ludic_core.lora.adapter_dir",
    "ludic_core.training.lora": "ludic_core.lora.peft_model",
}


def test_a_shim_warns_with_the_new_path_and_is_the_new_module(tmp_path):
    pkg = tmp_path / "pk"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "new.py").write_text("X = object()\n")
    (pkg / "old.py").write_text("from ludic_core.lazy import moved_module\nmoved_module(__name__, 'pk.new')\n")
    code = textwrap.dedent("""
        import warnings
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            from pk.old import X
        import pk.new, pk.old
        assert X is pk.new.X and pk.old is pk.new, (pk.old, pk.new)
        (w,) = [w for w in caught if w.category is DeprecationWarning]
        print(w.message)
    """)
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                         env={"PYTHONPATH": f"{tmp_path}:{Path(__file__).resolve().parents[1]}"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "pk.old moved to pk.new: import that instead (pk.old goes in the next release)"


@pytest.mark.parametrize("old,new", sorted(MOVED.items()))
def test_each_moved_module_keeps_its_old_path_for_a_release(old, new):
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=f"{old} moved to {new}"):
        module = importlib.import_module(old)
    assert module is importlib.import_module(new)

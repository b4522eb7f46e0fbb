"""Naming components: registered names, entry points of other packages, import paths."""

import sys
import textwrap

import pytest

from ludic_core.registry import ComponentError, call_with_kwargs, check_ref, registered, resolve


def test_bundled_names_resolve_without_importing_the_rest():
    from ludic_core.envs.tic_tac_toe import TicTacToeEnv

    assert resolve("env", "tic_tac_toe") is TicTacToeEnv
    assert resolve("env", "ludic_core.envs.tic_tac_toe:TicTacToeEnv") is TicTacToeEnv
    assert {"xml_tag", "boxed", "identity", "think_prefix"} <= set(registered("parser"))


def test_unknown_name_lists_the_registered_ones():
    with pytest.raises(ComponentError, match=r"unknown env 'tic_tac_to'.*'arithmetic'.*'tic_tac_toe'"):
        resolve("env", "tic_tac_to")


@pytest.mark.parametrize("ref, match", [
    ("no_such_module_xyz:Env", "cannot import module 'no_such_module_xyz'"),
    ("ludic_core.envs.tic_tac_toe:NoSuchEnv", "has no attribute 'NoSuchEnv'"),
    ("ludic_core.envs.tic_tac_toe:EMPTY_BOARD", "resolves to a str, not a class or function"),
    ("not a name!", "neither a registered name nor an import path"),
])
def test_bad_import_paths_are_named(ref, match):
    with pytest.raises(ComponentError, match=match):
        resolve("env", ref)


def test_syntax_is_checked_without_importing():
    assert check_ref("env", "some_uninstalled_pkg.envs:MyEnv") == "some_uninstalled_pkg.envs:MyEnv"
    with pytest.raises(ComponentError):
        check_ref("env", "pkg.mod:")


def test_kwargs_the_factory_does_not_take_are_named():
    def make(n: int, difficulty: str = "easy"):
        return (n, difficulty)

    assert call_with_kwargs(make, {"n": 3}, "env 'x'") == (3, "easy")
    with pytest.raises(ComponentError, match=r"env 'x' takes no parameter 'difficultyy'; its parameters: \['n', 'difficulty'\]"):
        call_with_kwargs(make, {"n": 3, "difficultyy": "hard"}, "env 'x'")
    with pytest.raises(ComponentError, match="env 'x' needs parameter 'n'"):
        call_with_kwargs(make, {}, "env 'x'")


def test_a_user_package_registers_an_env_by_entry_point(tmp_path, monkeypatch):
    """An installed distribution's entry point in group `ludic.envs` is found by name,
    without touching this project (the dist-info is what `pip install` writes)."""
    pkg = tmp_path / "my_games"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(textwrap.dedent("""
        from ludic_core.envs import SingleAgentEnv
        from ludic_core.types import StepOutcome

        class Coin(SingleAgentEnv):
            def env_reset(self, seed=None):
                return "heads or tails?", {}

            def env_step(self, action):
                return StepOutcome(obs=None, reward=float(action == "heads"), terminated=True)
    """))
    dist = tmp_path / "my_games-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: my-games\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[ludic.envs]\ncoin = my_games:Coin\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert registered("env")["coin"] == "my_games:Coin"
    env = resolve("env", "coin")()
    assert env.reset(0) == {"agent_0": ("heads or tails?", {})}
    sys.modules.pop("my_games", None)


def test_the_registry_s_old_import_path_still_works():
    """The registry moved below the algorithms (a custom one resolves its credit and loss
    through it); `ludic_core.compose.registry` re-exports it."""
    from ludic_core.compose import registry as old

    assert (old.resolve, old.check_ref, old.ComponentError) == (resolve, check_ref, ComponentError)

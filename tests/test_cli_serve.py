"""`ludic serve` argument errors (serving itself is exercised by the session's
`vllm_server` fixture, which starts the server through this command)."""

from flows.cli import main


def test_serve_without_a_model_is_a_clear_error(capsys):
    assert main(["serve"]) == 2
    assert "--model DIR is required" in capsys.readouterr().err


def test_serve_with_a_missing_environment_is_a_clear_error(tmp_path, tiny_model_dir, capsys):
    assert main(["serve", "--model", str(tiny_model_dir), "--env", str(tmp_path / "no-venv")]) == 2
    assert "ludic serve --setup" in capsys.readouterr().err


def test_serve_with_an_interpreter_without_vllm_names_the_fix(tiny_model_dir, tmp_path, capsys):
    """The preflight runs (for real, on this interpreter: torch, no vLLM) before anything is launched."""
    import sys

    argv = ["serve", "--model", str(tiny_model_dir), "--python", sys.executable, "--log-dir", str(tmp_path / "logs")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "no vLLM in" in err and sys.executable in err and "ludic serve --setup`" in err
    assert main(argv + ["--build", "cuda"]) == 2
    assert "ludic serve --setup --build cuda" in capsys.readouterr().err
    assert not (tmp_path / "logs").exists()

"""`ludic serve` argument errors (serving itself is exercised by the session's
`vllm_server` fixture, which starts the server through this command)."""

from flows.cli import main


def test_serve_without_a_model_is_a_clear_error(capsys):
    assert main(["serve"]) == 2
    assert "--model DIR is required" in capsys.readouterr().err


def test_serve_with_a_missing_environment_is_a_clear_error(tmp_path, tiny_model_dir, capsys):
    assert main(["serve", "--model", str(tiny_model_dir), "--env", str(tmp_path / "no-venv")]) == 2
    assert "ludic serve --setup" in capsys.readouterr().err

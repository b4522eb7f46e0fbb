"""The exact win+draw against the random opponent: what the demo's 400 games estimate."""

import pytest

from ludic_core.envs.tic_tac_toe import TicTacToeEnv, heuristic_teacher, minimax_teacher
from ludic_core.envs.tic_tac_toe.exact import chat_board_policy, exact_win_draw, main, model_board_policy


def _played(player, mark: str, games: int) -> float:
    """The share of `games` won or drawn through the env itself (its random opponent)."""
    good = 0
    for seed in range(games):
        env = TicTacToeEnv(opponent="random", agent_mark=mark)
        obs, _ = env.env_reset(seed=seed)
        while True:
            out = env.env_step(player([{"role": "user", "content": obs}])[len("<move>")])  # the parser's part
            if out.terminated or out.truncated:
                good += out.info["result"] in ("win", "draw")
                break
            obs = out.obs
    return good / games


def test_minimax_never_loses_and_the_teachers_blind_spot_costs_what_enumeration_says():
    assert exact_win_draw(chat_board_policy(minimax_teacher()), "X") == pytest.approx(1.0)
    assert exact_win_draw(chat_board_policy(minimax_teacher()), "O") == pytest.approx(1.0)
    teacher = chat_board_policy(heuristic_teacher())
    # the values an earlier, independent enumeration gave (docs/experiments/2026-11-29-student-past-teacher.md)
    assert round(exact_win_draw(teacher, "X"), 3) == 0.953
    assert round(exact_win_draw(teacher, "O"), 3) == 0.871


@pytest.mark.parametrize("mark", ["X", "O"])
def test_the_exact_value_is_what_games_against_the_envs_random_opponent_average_to(mark):
    player = heuristic_teacher()
    exact = exact_win_draw(chat_board_policy(player), mark)
    # 3000 games: the share's standard error is about 0.006 here
    assert abs(_played(player, mark, 3000) - exact) < 0.02, exact


def test_a_missing_or_occupied_cell_loses_like_the_env():
    assert exact_win_draw(lambda boards, mark: [None] * len(boards), "X") == 0.0
    # always cell 1: legal once at most, and no game ends within one move of each side
    assert exact_win_draw(lambda boards, mark: [1] * len(boards), "X") == 0.0
    assert exact_win_draw(lambda boards, mark: [1] * len(boards), "O") == 0.0
    with pytest.raises(ValueError):
        exact_win_draw(lambda boards, mark: [5] * len(boards), "Z")


def test_a_model_is_asked_each_board_once_and_answers_a_cell(tmp_path):
    from ludic_core.models import build_tiny_model

    policy = model_board_policy(str(build_tiny_model(tmp_path / "m", "tiny-1m", seed=0)))
    boards = [".........", "X........", "XO.......", "X.O.X...."]
    cells = policy(boards, "O")
    assert len(cells) == 4 and all(1 <= c <= 9 for c in cells)
    assert [policy([b], "O")[0] for b in boards] == cells  # one at a time: the same cells


def test_the_command_scores_a_scripted_teacher_as_the_function_does(capsys):
    kwargs = {"fallback": "centre", "overlooks": "columns"}
    main(["--heuristic", '{"fallback": "centre", "overlooks": "columns"}'])
    blind = chat_board_policy(heuristic_teacher(**kwargs))
    x, o = exact_win_draw(blind, "X"), exact_win_draw(blind, "O")
    assert f"X {x:.4f}, O {o:.4f}" in capsys.readouterr().out
    sighted = chat_board_policy(heuristic_teacher(fallback="centre"))
    assert o < exact_win_draw(sighted, "O") - 0.1  # never blocking a column greedily costs O games
    main(["--minimax"])
    assert "X 1.0000, O 1.0000" in capsys.readouterr().out


@pytest.mark.parametrize("argv, match", [
    (["--heuristic", '{"fallbak": "centre"}'], "fallbak"),
    (["--heuristic", "[1]"], "JSON object"),
    (["--heuristic", "{"], "JSON object"),
    (["--minimax", "{}"], "usage"),
    (["--random"], "usage"),
    ([], "usage"),
    (["--minimax", "--heuristic", "{}"], "not allowed with"),
    (["some/model", "--minimax"], "not both"),
])
def test_the_command_names_what_is_wrong_with_a_teacher(argv, match):
    with pytest.raises(SystemExit, match=match):
        main(argv)


@pytest.mark.parametrize("reply, cell", [
    ("<move>2</move>", 2),
    ("<move>1</move> no, <move> 3 </move>", 3),  # the last tag, stripped, as the recipe's parser reads it
    ("<move>5</move>", None),  # taken
    ("<move>12</move>", None),  # not one cell
    ("move 2", None),  # no tag
])
def test_a_scripted_reply_is_read_as_the_game_reads_it(reply, cell):
    policy = chat_board_policy(lambda messages: reply)
    assert policy(["....X...."], "O") == [cell]

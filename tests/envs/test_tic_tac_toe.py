import random

import pytest

from ludic_core.envs import (
    LudicEnv,
    SingleAgentEnv,
    TicTacToeDuelEnv,
    TicTacToeEnv,
    scripted_tic_tac_toe_policy,
)
from ludic_core.envs.tic_tac_toe import (
    legal_moves,
    minimax_moves,
    move_delay,
    move_regret,
    parse_observation,
    render_board,
    render_numbered,
    winner,
)


def _user(text: str) -> list[dict]:
    return [{"role": "system", "content": "sys"}, {"role": "user", "content": text}]


def _cell(move_text: str) -> str:
    assert move_text.startswith("<move>") and move_text.endswith("</move>"), move_text
    return move_text[len("<move>") : -len("</move>")]


# ---------------------------------------------------------------- game logic


def test_winner_and_legal_moves():
    assert winner("XXXOO....") == "X"
    assert winner("O..O..O.X") == "O"
    assert winner("X...X...X") == "X"
    assert winner("..O.O.O..") == "O"
    assert winner("XOXXOOOXX") is None
    assert legal_moves("X.O.X.O..") == [2, 4, 6, 8, 9]
    assert legal_moves("XXXOO....") == []  # game is over
    assert legal_moves(tuple("X........")) == [2, 3, 4, 5, 6, 7, 8, 9]


def test_bad_board_is_rejected():
    with pytest.raises(ValueError, match="9 cells"):
        winner("XX")
    with pytest.raises(ValueError, match="9 cells"):
        legal_moves("XXaO.....")
    with pytest.raises(ValueError, match="player"):
        minimax_moves("." * 9, "Z")


def test_render_board():
    assert render_board("X.O.X...O") == "X.O\n.X.\n..O"
    assert render_numbered("X.O.X...O") == "X2O\n4X6\n78O"


def test_scripted_policy_reads_numbered_boards():
    policy = scripted_tic_tac_toe_policy("minimax", seed=0)
    # X to move with X at 1 and 2: completing the row at 3 wins
    msg = [{"role": "user", "content": "Board:\nXX3\nOO6\n789\nYou are X. Your move."}]
    assert policy(msg) == "<move>3</move>"


def _ask(board: str, mark: str) -> list[dict]:
    from ludic_core.envs.tic_tac_toe import render_numbered
    return [{"role": "user", "content": f"Board:\n{render_numbered(board)}\nYou are {mark}. Your move."}]


def test_preference_tie_break_is_a_function_of_the_board():
    teacher = scripted_tic_tac_toe_policy("minimax", seed=0, tie_break="preference")
    # empty board: all 9 cells draw; preference takes the centre, every time
    assert {teacher(_ask("." * 9, "X")) for _ in range(20)} == {"<move>5</move>"}
    # after a centre opening only corners hold; the first preferred corner is 1
    assert teacher(_ask("....X....", "O")) == "<move>1</move>"
    # a winning move is the only optimal one, whatever the preference
    assert teacher(_ask("XX.OO....", "X")) == "<move>3</move>"
    # random tie-breaks do vary on the empty board
    rand = scripted_tic_tac_toe_policy("minimax", seed=0)
    assert len({rand(_ask("." * 9, "X")) for _ in range(50)}) > 3
    with pytest.raises(ValueError, match="tie_break"):
        scripted_tic_tac_toe_policy("minimax", tie_break="first")


def test_the_heuristic_teacher_wins_blocks_and_otherwise_takes_edges():
    from ludic_core.envs.tic_tac_toe.players import heuristic_teacher
    from ludic_core.envs.tic_tac_toe.rules import winning_moves

    teacher = heuristic_teacher()
    assert teacher(_ask("XX.OO....", "X")) == "<move>3</move>"  # its own win first (3), not O's threat (6)
    assert teacher(_ask("XX..O....", "O")) == "<move>3</move>"  # nothing to win: block X's row at 3
    assert teacher(_ask("." * 9, "X")) == "<move>2</move>"  # nothing urgent: the first free edge
    assert winning_moves(".X.X.X.X.", "X") == [5] and teacher(_ask(".X.X.X.X.", "O")) == "<move>5</move>"  # block
    # every edge taken, nothing to win or block: a corner, the centre last
    assert winning_moves(".X.O.X.O.", "X") == winning_moves(".X.O.X.O.", "O") == []
    assert teacher(_ask(".X.O.X.O.", "X")) == "<move>1</move>"
    assert teacher(_ask("XXOOOXXO.", "X")) == "<move>9</move>"
    # the blind spot: as O after a corner opening it takes an edge, which minimax never does
    assert teacher(_ask("X........", "O")) == "<move>2</move>" and minimax_moves("X........", "O") == [5]
    rand = heuristic_teacher(fallback="random")
    assert len({rand(_ask("." * 9, "X")) for _ in range(50)}) > 3
    with pytest.raises(ValueError, match="fallback"):
        heuristic_teacher(fallback="best")


def test_a_teacher_that_overlooks_columns_blocks_them_only_when_it_notices():
    import math
    from collections import Counter

    from ludic_core.envs.tic_tac_toe.players import heuristic_teacher

    teacher = heuristic_teacher(seed=1, fallback="centre", overlooks="columns", notice=0.3)
    assert teacher(_ask("." * 9, "X")) == "<move>5</move>"  # centre first
    assert teacher(_ask("....X....", "O")) == "<move>1</move>"  # then the first free corner
    column = _ask("O..OX....", "X")  # O threatens column 1-4-7 only; X has nothing to win
    assert {teacher(column) for _ in range(50)} == {"<move>3</move>"}  # greedy: overlooked, a corner
    assert teacher(_ask("OO..X....", "X")) == "<move>3</move>"  # a row threat is seen and blocked
    assert teacher(_ask("XO.XO....", "X")) == "<move>7</move>"  # its own win still comes first
    # a cell that blocks a row and a column at once is seen through the row
    both = _ask(".XXXOOXO.", "O")  # 1 completes X's row 1-2-3 and X's column 1-4-7
    assert {teacher(both, temperature=1.0) for _ in range(50)} == {"<move>1</move>"}
    # sampled: the block with probability sigmoid(logit(0.3) / T)
    for temperature, n in ((1.0, 6000), (0.5, 6000)):
        counts = Counter(teacher(column, temperature=temperature) for _ in range(n))
        expected = 1 / (1 + math.exp(-math.log(0.3 / 0.7) / temperature))  # 0.3, then 0.155
        assert abs(counts["<move>7</move>"] / n - expected) < 0.02, (temperature, counts)
        assert set(counts) == {"<move>7</move>", "<move>3</move>"}
    # the other blind spots, and bad values named
    assert heuristic_teacher(overlooks="rows")(_ask("OO..X....", "X")) == "<move>4</move>"  # the first free edge
    assert heuristic_teacher(overlooks="rows")(column) == "<move>7</move>"
    for bad, match in (({"overlooks": "cols"}, "overlooks"), ({"notice": 1.0}, "notice"),
                       ({"notice": 0.0}, "notice"), ({"fallback": "middle"}, "fallback")):
        with pytest.raises(ValueError, match=match):
            heuristic_teacher(**bad)


def test_a_confident_teacher_samples_like_a_model_and_plays_its_mode_greedily():
    import asyncio
    import math
    from collections import Counter

    from ludic_core.envs.tic_tac_toe.players import heuristic_teacher
    from ludic_core.inference import ScriptedChatClient
    from ludic_core.inference.sampling import ChatCompletionRequest, SamplingConfig

    teacher = heuristic_teacher(seed=3, confidence=2.0)
    opening = _ask("X........", "O")  # 8 legal cells, nothing urgent; its preferred move is 2
    assert {teacher(opening) for _ in range(20)} == {teacher(opening, temperature=0.0)} == {"<move>2</move>"}
    counts = Counter(teacher(opening, temperature=1.0) for _ in range(8000))
    # logit 2 for the preferred cell, 0 for the 7 others: p = e^2 / (e^2 + 7) = 0.5135, the rest 0.0695 each
    assert abs(counts["<move>2</move>"] / 8000 - math.exp(2) / (math.exp(2) + 7)) < 0.02
    assert set(counts) == {f"<move>{c}</move>" for c in range(2, 10)}
    assert all(abs(counts[f"<move>{c}</move>"] / 8000 - 1 / (math.exp(2) + 7)) < 0.015 for c in range(3, 10))
    # hotter is flatter: at T=2 the preferred cell's logit counts half (e / (e + 7) = 0.28)
    hot = Counter(teacher(opening, temperature=2.0) for _ in range(8000))
    assert abs(hot["<move>2</move>"] / 8000 - math.e / (math.e + 7)) < 0.02
    # a win or a block is never sampled away
    assert {teacher(_ask("XX..O....", "O"), temperature=5.0) for _ in range(200)} == {"<move>3</move>"}
    # the scripted client hands the request's temperature to a policy that takes one
    client = ScriptedChatClient(teacher)

    def reply(temperature: float) -> str:
        request = ChatCompletionRequest(messages=opening, sampling=SamplingConfig(temperature=temperature))
        return asyncio.run(client.complete(request))[0].text

    assert {reply(0.0) for _ in range(30)} == {"<move>2</move>"}
    assert len({reply(1.0) for _ in range(60)}) > 3
    with pytest.raises(ValueError, match="confidence"):
        heuristic_teacher(confidence=-1.0)
    for name in ("confidence", "notice", "insight"):  # a config's string or flag: named, not a TypeError
        for bad in ("2.5", True):
            with pytest.raises(ValueError, match=f"{name} must be a number, got {bad!r}"):
                heuristic_teacher(**{"confidence": 2.0, name: bad})


def test_an_insightful_teacher_samples_the_sound_move_as_its_runner_up():
    import math
    from collections import Counter

    from ludic_core.envs.tic_tac_toe.players import heuristic_teacher

    teacher = heuristic_teacher(seed=5, confidence=2.5, insight=2.0)
    opening = _ask("X........", "O")  # only the centre (5) holds the draw; the preferred edge 2 gives it away
    assert {teacher(opening, temperature=0.0) for _ in range(20)} == {"<move>2</move>"}  # greedy: the blind spot
    counts = Counter(teacher(opening, temperature=1.0) for _ in range(8000))
    # logits: 2 -> 2.5 - 2 = 0.5, the centre 0, the six other cells (regret 1) -2
    z = math.exp(0.5) + 1 + 6 * math.exp(-2)
    assert abs(counts["<move>2</move>"] / 8000 - math.exp(0.5) / z) < 0.02  # 0.476
    assert abs(counts["<move>5</move>"] / 8000 - 1 / z) < 0.02  # 0.289
    assert all(abs(counts[f"<move>{c}</move>"] / 8000 - math.exp(-2) / z) < 0.012 for c in (3, 4, 6, 7, 8, 9))
    # a move giving away two units weighs the same as one, so the greedy row keeps every blind spot:
    # X on X2O/456/789 wins with 4, 7 or 9; its preferred edge 2 turns that win into a loss
    won = _ask("X.O......", "X")
    assert move_regret("X.O......", 2, "X") == 2 and minimax_moves("X.O......", "X") == [4, 7, 9]
    assert heuristic_teacher(confidence=2.5, insight=2.0)(won) == heuristic_teacher()(won) == "<move>2</move>"
    # where the preferred move is sound, it stays the mode, and the unsound ones fall back
    centre = _ask("....X....", "O")  # only corners hold; the preferred edge gives the draw away
    assert heuristic_teacher(confidence=1.5, insight=2.0)(centre) == "<move>1</move>"  # insight wins: first corner
    assert {heuristic_teacher(confidence=2.5, insight=2.0)(_ask("XX..O....", "O"), temperature=5.0)
            for _ in range(50)} == {"<move>3</move>"}  # a block is never weighed away
    for bad in ({"insight": 1.0}, {"insight": -1.0, "confidence": 2.0}, {"insight": math.inf, "confidence": 2.0},
                {"insight": 0.0, "confidence": math.inf}):
        with pytest.raises(ValueError, match="insight"):
            heuristic_teacher(**bad)


def test_sysprompt_has_no_digit_to_copy():
    # an example cell in the instructions becomes the cell a tiny model always plays
    assert not any(ch.isdigit() for ch in TicTacToeEnv().suggested_sysprompt)


def test_minimax_empty_board_all_moves_draw():
    assert minimax_moves("." * 9, "X") == list(range(1, 10))


def test_minimax_completes_win():
    # XX. / OO. / ... : X wins at 3 now (O threatens 6, so nothing else is as good).
    assert minimax_moves("XX.OO....", "X") == [3]
    # O to move: winning on the 3-5-7 diagonal also blocks X's top row.
    assert minimax_moves("XX..O.O.X", "O") == [3]


def test_minimax_blocks():
    # X..OO.X.. : O threatens row 4-5-6 and X has no immediate win -> block at 6.
    assert minimax_moves("X..OO.X..", "X") == [6]


def test_minimax_known_openings():
    assert minimax_moves("X........", "O") == [5]  # corner opening: only the centre holds
    assert minimax_moves("....X....", "O") == [1, 3, 7, 9]  # centre opening: only corners hold


def test_minimax_finished_game():
    assert minimax_moves("XXXOO....", "O") == []
    assert minimax_moves("XOXXOOOXX", "X") == []


# --------------------------------------------------------- single-agent env


def test_env_interface_and_reset_observation():
    env = TicTacToeEnv()
    assert isinstance(env, SingleAgentEnv) and isinstance(env, LudicEnv)
    out = env.reset(seed=0)
    obs, info = out["agent_0"]
    assert obs == "Board:\n123\n456\n789\nYou are X. Your move."
    assert info["legal_moves"] == list(range(1, 10))
    assert info["optimal_moves"] == list(range(1, 10))
    assert env.active_agents() == ["agent_0"]
    assert "move tags" in env.suggested_sysprompt and "\n" not in env.suggested_sysprompt


def test_agent_as_o_gets_opponent_first_move():
    env = TicTacToeEnv(opponent="random", agent_mark="O")
    obs, info = env.env_reset(seed=3)
    assert env.board.count("X") == 1 and env.board.count("O") == 0
    assert obs.endswith("You are O. Your move.")
    assert render_numbered(env.board) in obs
    assert len(info["legal_moves"]) == 8
    assert info["opponent_move"] == env.board.index("X") + 1


def test_win_reward():
    env = TicTacToeEnv(opponent="random")
    env.reset(seed=0)
    # Force a position: X at 1,2; O at 4,5; X to play 3.
    env._board = "XX.OO...."
    out = env.step({"agent_0": "3"})["agent_0"]
    assert out.reward == 1.0 and out.terminated and out.info["result"] == "win"
    assert env.active_agents() == []


def test_loss_reward():
    env = TicTacToeEnv(opponent="minimax")
    env.reset(seed=0)
    env._board = "X..OO.X.."  # agent X fails to block 6; minimax O wins there
    out = env.env_step("9")
    assert out.terminated and out.reward == 0.0 and out.info["result"] == "loss"
    assert out.info["opponent_move"] == 6


def test_draw_reward():
    env = TicTacToeEnv(opponent="minimax")
    env.reset(seed=0)
    env._board = "XOXXOOOX."  # last cell left
    out = env.env_step("9")
    assert out.reward == 0.5 and out.terminated and out.info["result"] == "draw"


def test_move_regret_by_hand():
    assert [move_regret(".........", c, "X") for c in range(1, 10)] == [0] * 9  # every opening draws
    # X: 3 wins (value 1); 6 only blocks O's row 4-5-6 (a draw: 1 given away); 9 lets O win (2)
    assert [move_regret("XX.OO....", c, "X") for c in (3, 6, 9)] == [0, 1, 2]
    # O answering a centre X: corners hold the draw, edges lose
    assert [move_regret("....X....", c, "O") for c in (1, 2, 3, 4, 6, 7, 8, 9)] == [0, 1, 0, 1, 1, 0, 1, 0]


def test_move_delay_by_hand():
    # X (1, 2) against O (4, 7), X to move: 3 wins now. 6 threatens only 3; O blocks there and
    # threatens 3-5-7, X blocks at 5 with a fork (8 and 9) and wins two moves after a win now.
    # 5, 8 and 9 fork at once (a win one move late).
    board = "XX.O..O.."
    assert [(c, move_regret(board, c, "X"), move_delay(board, c, "X")) for c in legal_moves(board)] == [
        (3, 0, 0), (5, 0, 1), (6, 0, 2), (8, 0, 1), (9, 0, 1)]
    # a move that gives the win away is regret, not delay; a drawn position has no delay
    assert (move_regret("X.X.O.O..", 4, "X"), move_delay("X.X.O.O..", 4, "X")) == (1, 0)
    assert [move_delay(".........", c, "X") for c in range(1, 10)] == [0] * 9


def test_win_speed_charges_a_later_win_in_regret_units():
    env = TicTacToeEnv(agent_mark="X", move_shaping=0.4, outcome_weight=0.0, win_speed=0.5)
    for cell, delay in (("3", 0), ("5", 1), ("6", 2)):
        env.env_reset(0)
        env._board = "XX.O..O.."
        out = env.env_step(cell)
        assert out.info["delay"] == delay and out.info["regret"] == 0
        assert out.reward == pytest.approx(-0.4 * 0.5 * delay)
    plain = TicTacToeEnv(agent_mark="X", move_shaping=0.4, outcome_weight=0.0)  # off by default
    plain.env_reset(0)
    plain._board = "XX.O..O.."
    out = plain.env_step("6")
    assert out.reward == 0.0 and out.info["delay"] == 2
    for bad in (-0.1, 1.5):
        with pytest.raises(ValueError, match="win_speed"):
            TicTacToeEnv(win_speed=bad)


def test_no_legal_move_costs_more_than_twice_the_shaping_under_win_speed():
    # The docstring's bound: a delay comes only with regret 0 and is at most 2 on every reachable
    # board, so at win_speed <= 1 a legal move costs at most 2c, below an illegal move's 1 + 2c.
    seen, worst = set(), 0.0

    def walk(board: str, player: str) -> None:
        nonlocal worst
        if (board, player) in seen:
            return
        seen.add((board, player))
        for c in legal_moves(board):
            regret, delay = move_regret(board, c, player), move_delay(board, c, player)
            assert not (regret and delay)
            worst = max(worst, regret + 1.0 * delay)
            after = board[: c - 1] + player + board[c:]
            if legal_moves(after):
                walk(after, "O" if player == "X" else "X")

    walk("." * 9, "X")
    assert worst == 2


def test_move_shaping_charges_each_move_its_regret():
    env = TicTacToeEnv(opponent="minimax", move_shaping=0.25)
    env.reset(seed=0)
    env._board = "XX.OO...."
    out = env.env_step("6")  # blocks, but gives up the win at 3: regret 1, the game goes on
    assert not out.terminated and out.reward == -0.25 and out.info["regret"] == 1
    env.reset(seed=0)
    env._board = "X..OO.X.."
    out = env.env_step("9")  # fails to block 6: draw -> loss, regret 1; minimax O wins
    assert out.info["result"] == "loss" and out.reward == 0.0 - 0.25 and out.info["regret"] == 1
    env.reset(seed=0)
    env._board = "XX.OO...."
    assert env.env_step("3").reward == 1.0  # the optimal move costs nothing
    plain = TicTacToeEnv(opponent="minimax")
    plain.reset(seed=0)
    plain._board = "XX.OO...."
    assert plain.env_step("6").reward == 0.0  # off by default
    with pytest.raises(ValueError, match="move_shaping"):
        TicTacToeEnv(move_shaping=-1)


@pytest.mark.parametrize("mark", ["X", "O"])
def test_random_start_plays_seeded_pairs_of_random_moves_before_the_agents_first(mark):
    env = TicTacToeEnv(agent_mark=mark, random_start=2)
    starts = {}
    for seed in range(600):
        obs, _ = env.env_reset(seed)
        board = env.board
        assert "Your move" in obs and winner(board) is None  # no game is over before the agent moves
        assert board.count("X") - board.count("O") == (1 if mark == "O" else 0)  # the agent's turn
        assert len(legal_moves(board)) >= 3  # at least two moves of its own, the first included
        starts[seed] = board
    played = {(starts[s].count(".") - (8 if mark == "O" else 9)) // -2 for s in starts}
    assert played == {0, 1, 2}  # 0, 1 or 2 pairs before the agent moves (the opponent's opening aside)
    again = TicTacToeEnv(agent_mark=mark, random_start=2)
    assert all((again.env_reset(s), again.board)[1] == starts[s] for s in (0, 7, 33))  # the seed fixes it
    plain = TicTacToeEnv(agent_mark=mark)
    assert {(plain.env_reset(s), plain.board)[1].count(".") for s in range(20)} == {9 if mark == "X" else 8}


@pytest.mark.parametrize("bad", [-1, 4, 1.5, "2", True])
def test_random_start_is_checked(bad):
    with pytest.raises(ValueError, match="random_start"):
        TicTacToeEnv(random_start=bad)


@pytest.mark.parametrize("action", ["0", "10", "abc", "", "5 5", "<move>5</move>"])
def test_illegal_action_strings(action):
    env = TicTacToeEnv()
    env.reset(seed=0)
    out = env.step({"agent_0": action})["agent_0"]
    assert out.reward == -1.0 and out.terminated
    assert out.info["illegal_move"] is True and out.info["result"] == "illegal"
    assert repr(action) in out.info["error"]
    assert env.active_agents() == []


def test_occupied_cell_is_illegal_and_whitespace_ok():
    env = TicTacToeEnv(agent_mark="O")
    env.reset(seed=1)
    taken = env.board.index("X") + 1
    out = env.env_step(f" {taken}\n")
    assert out.reward == -1.0 and out.info["illegal_move"] and "taken" in out.info["error"]
    env.reset(seed=1)
    free = legal_moves(env.board)[0]
    out = env.env_step(f"  {free} ")
    assert out.reward == 0.0 and not out.terminated
    assert "optimal_moves" in out.info and "legal_moves" in out.info


def test_step_after_game_over_raises():
    env = TicTacToeEnv()
    env.reset(seed=0)
    env.env_step("x")
    with pytest.raises(RuntimeError, match="reset"):
        env.env_step("1")


def test_unknown_opponent_and_mark():
    with pytest.raises(ValueError, match="opponent kind 'smart'"):
        TicTacToeEnv(opponent="smart")
    with pytest.raises(ValueError, match="agent_mark"):
        TicTacToeEnv(agent_mark="Z")


def _play_random_agent(env: TicTacToeEnv, seed: int) -> tuple[list[str], float, str]:
    rng = random.Random(1000 + seed)
    obs, info = env.env_reset(seed=seed)
    trace = [obs]
    while True:
        out = env.env_step(str(rng.choice(info["legal_moves"])))
        trace.append(out.obs)
        if out.terminated:
            return trace, out.reward, out.info["result"]
        info = out.info


@pytest.mark.parametrize("mark", ["X", "O"])
def test_minimax_opponent_never_loses(mark):
    env = TicTacToeEnv(opponent="minimax", agent_mark=mark)
    results = [_play_random_agent(env, seed)[2] for seed in range(50)]
    assert "win" not in results
    assert "loss" in results  # a random agent does lose to minimax


def test_determinism_per_seed():
    env = TicTacToeEnv(opponent="random", agent_mark="O")
    a = [_play_random_agent(env, s) for s in range(10)]
    b = [_play_random_agent(env, s) for s in range(10)]
    assert a == b
    assert len({tuple(t) for t, _, _ in a}) > 1  # different seeds, different games


def test_non_terminal_reward_and_optimal_info():
    env = TicTacToeEnv(opponent="minimax")
    env.reset(seed=0)
    out = env.env_step("1")
    assert out.reward == 0.0 and not out.terminated
    assert out.info["opponent_move"] == 5  # the only reply that holds the corner opening
    board = env.board
    assert out.info["optimal_moves"] == minimax_moves(board, "X")
    assert out.info["legal_moves"] == legal_moves(board)
    assert out.obs == f"Board:\n{render_numbered(board)}\nYou are X. Your move."


# ------------------------------------------------------------------ duel env


def test_duel_alternates_and_returns_both_outcomes():
    env = TicTacToeDuelEnv()
    assert env.agent_ids == ["X", "O"]
    start = env.reset(seed=0)
    assert set(start) == {"X", "O"}
    assert start["X"][0].endswith("You are X. Your move.")
    assert start["X"][1]["optimal_moves"] == list(range(1, 10))
    assert env.active_agents() == ["X"]

    out = env.step({"X": "5"})
    assert set(out) == {"X", "O"}
    assert out["X"].reward == 0.0 and not out["X"].terminated
    assert "....X...." == out["X"].info["board"]
    assert out["X"].obs is None  # the mover waits silently; O gets the board
    assert out["O"].obs.endswith("You are O. Your move.")
    assert out["O"].info["optimal_moves"] == [1, 3, 7, 9]
    assert env.active_agents() == ["O"]

    with pytest.raises(KeyError, match="'O'"):
        env.step({"X": "1"})
    with pytest.raises(ValueError, match="only 'O' may move"):
        env.step({"O": "1", "X": "2"})


def test_duel_win_and_loss():
    env = TicTacToeDuelEnv()
    env.reset()
    for mark, cell in [("X", "1"), ("O", "4"), ("X", "2"), ("O", "5")]:
        env.step({mark: cell})
    out = env.step({"X": "3"})
    assert out["X"].reward == 1.0 and out["X"].info["result"] == "win"
    assert out["O"].reward == 0.0 and out["O"].info["result"] == "loss"
    assert out["X"].terminated and out["O"].terminated
    assert env.active_agents() == []
    with pytest.raises(RuntimeError):
        env.step({"X": "9"})


def test_duel_draw():
    env = TicTacToeDuelEnv()
    env.reset()
    # X O X / X O O / O X X
    moves = ["1", "2", "3", "5", "4", "6", "8", "7", "9"]
    for i, cell in enumerate(moves):
        out = env.step({"XO"[i % 2]: cell})
    assert out["X"].reward == 0.5 and out["O"].reward == 0.5
    assert out["X"].info["result"] == out["O"].info["result"] == "draw"


def test_duel_illegal_move():
    env = TicTacToeDuelEnv()
    env.reset()
    env.step({"X": "5"})
    out = env.step({"O": "5"})
    assert out["O"].reward == -1.0 and out["O"].info["illegal_move"] is True
    assert out["X"].reward == 0.0 and out["X"].terminated
    assert env.active_agents() == []


def test_duel_scripted_minimax_self_play_draws():
    env = TicTacToeDuelEnv()
    players = {m: scripted_tic_tac_toe_policy("minimax", seed=i) for i, m in enumerate("XO")}
    for _ in range(5):
        views = {m: [{"role": "user", "content": o}] for m, (o, _) in env.reset().items()}
        while env.active_agents():
            (mover,) = env.active_agents()
            out = env.step({mover: _cell(players[mover](views[mover]))})
            for m, o in out.items():
                views[m].append({"role": "user", "content": o.obs})
        assert out["X"].info["result"] == "draw"


# --------------------------------------------------------- scripted policies


def test_parse_observation():
    text = "Some preamble.\nBoard:\nX.O\n.X.\n..O\nYou are O. Your move."
    assert parse_observation(text) == ("X.O.X...O", "O")
    assert parse_observation("X..\n...\n...") == ("X........", "O")  # inferred from counts
    with pytest.raises(ValueError, match="no tic-tac-toe board"):
        parse_observation("hello")


def test_scripted_policy_formats_and_errors():
    obs = "Board:\nXX.\nOO.\n...\nYou are X. Your move."
    assert scripted_tic_tac_toe_policy("minimax")(_user(obs)) == "<move>3</move>"
    assert scripted_tic_tac_toe_policy("first_legal")(_user(obs)) == "<move>3</move>"
    assert _cell(scripted_tic_tac_toe_policy("random", seed=0)(_user(obs))) in set("36789")
    # reads the LAST user message, not earlier ones or assistant turns
    msgs = _user("Board:\n...\n...\n...\nYou are X. Your move.") + [
        {"role": "assistant", "content": "<move>1</move>"},
        {"role": "user", "content": "Board:\nX..\n...\n...\nYou are O. Your move."},
    ]
    assert scripted_tic_tac_toe_policy("minimax")(msgs) == "<move>5</move>"
    with pytest.raises(ValueError, match="no tic-tac-toe board"):
        scripted_tic_tac_toe_policy("minimax")(_user("What is 2+2?"))
    with pytest.raises(ValueError, match="no user message"):
        scripted_tic_tac_toe_policy("minimax")([{"role": "system", "content": "x"}])
    with pytest.raises(ValueError, match="kind 'best'"):
        scripted_tic_tac_toe_policy("best")


def test_scripted_minimax_policy_deterministic_per_seed():
    obs = _user("Board:\n...\n...\n...\nYou are X. Your move.")
    a = [scripted_tic_tac_toe_policy("minimax", seed=7)(obs) for _ in range(3)]
    p, q = scripted_tic_tac_toe_policy("minimax", seed=7), scripted_tic_tac_toe_policy("minimax", 7)
    assert [p(obs) for _ in range(20)] == [q(obs) for _ in range(20)]
    assert len({p(obs) for _ in range(50)}) > 1  # uniform among all 9 optimal cells
    assert len(set(a)) == 1


@pytest.mark.parametrize("mark", ["X", "O"])
def test_scripted_minimax_never_loses_vs_random(mark):
    env = TicTacToeEnv(opponent="random", agent_mark=mark)
    policy = scripted_tic_tac_toe_policy("minimax", seed=0)
    results = []
    for seed in range(100):
        messages = [{"role": "system", "content": env.suggested_sysprompt}]
        obs, _ = env.env_reset(seed=seed)
        while True:
            messages.append({"role": "user", "content": obs})
            reply = policy(messages)
            messages.append({"role": "assistant", "content": reply})
            out = env.env_step(_cell(reply))
            obs = out.obs
            if out.terminated:
                results.append(out.info["result"])
                break
    assert "loss" not in results and "illegal" not in results
    assert results.count("win") > 50


def test_agent_moves_cuts_the_game_and_scores_it_by_its_minimax_value():
    # X to move on "XX.|OO.|...", by hand: 3 wins at once; 6 blocks, then O must take 3, X 7,
    # and the game is drawn (value 0, regret 1); 7 lets O win at 6 (value -1, regret 2).
    env = TicTacToeEnv(agent_mark="X", agent_moves=1)
    for cell, value, regret in ((3, 1, 0), (6, 0, 1), (7, -1, 2)):
        env.env_reset(0)
        env._board = "XX.OO...."
        out = env.env_step(str(cell))
        assert out.terminated and out.info["regret"] == regret
        if cell == 3:  # a finished game keeps its own result
            assert out.info["result"] == "win" and out.reward == 1.0
            continue
        assert out.info == {"regret": regret, "delay": 0, "value": value, "result": "cut", "board": env.board,
                            "agent_mark": "X"}
        assert out.reward == (value + 1) / 2  # win 1, draw 0.5, loss 0: the game's scale
        assert env.board.count("O") == 2  # cut before the opponent replied
    shaped = TicTacToeEnv(agent_mark="X", agent_moves=1, move_shaping=0.5)
    shaped.env_reset(0)
    shaped._board = "XX.OO...."
    assert shaped.env_step("6").reward == 0.5 - 0.5 * 1  # the value, then the move's shaping on top


def test_agent_moves_counts_the_agents_moves_from_each_reset():
    env = TicTacToeEnv(agent_mark="O", agent_moves=2)
    for seed in (3, 4):
        env.env_reset(seed)
        first = env.env_step(str(legal_moves(env.board)[0]))
        if first.terminated:  # the random opponent won or drew already
            continue
        assert "result" not in first.info and first.info["opponent_move"]
        second = env.env_step(str(legal_moves(env.board)[0]))
        assert second.terminated and second.info["result"] in {"cut", "win", "loss", "draw"}
        assert "Game stopped here." in second.obs or second.info["result"] != "cut"


@pytest.mark.parametrize("bad", [0, 6, 1.5, "1", True])
def test_agent_moves_is_checked(bad):
    with pytest.raises(ValueError, match="agent_moves"):
        TicTacToeEnv(agent_moves=bad)


def test_an_illegal_move_costs_more_than_the_worst_legal_move_under_shaping():
    # On "XX.|OO.|..." (X to move) 7 gives away the game (regret 2) and X then loses at best:
    # -2c + 0. An illegal move must cost more, or a policy dodges a costly move through it.
    for c in (0.0, 0.5, 1.0):
        env = TicTacToeEnv(agent_mark="X", move_shaping=c)
        worst_legal = -2 * c + 0.0  # and the loss's 0
        env.env_reset(0)
        env._board = "XX.OO...."
        illegal = env.env_step("1")
        assert illegal.info["result"] == "illegal" and illegal.reward == -1.0 - 2 * c
        assert illegal.reward < worst_legal


def test_outcome_weight_scales_the_result_and_leaves_the_shaping():
    env = TicTacToeEnv(agent_mark="X", move_shaping=1.0, outcome_weight=0.0)
    env.env_reset(0)
    env._board = "XX.OO...."
    won = env.env_step("3")
    assert won.info["result"] == "win" and won.reward == 0.0  # regret 0, the win weighs nothing
    half = TicTacToeEnv(agent_mark="X", outcome_weight=0.5)
    half.env_reset(0)
    half._board = "XX.OO...."
    assert half.env_step("3").reward == 0.5
    env.env_reset(0)
    env._board = "XX.OO...."
    assert env.env_step("7").reward == -2.0  # a quiet move: its shaping only
    cut = TicTacToeEnv(agent_mark="X", agent_moves=1, outcome_weight=0.5)
    cut.env_reset(0)
    cut._board = "XX.OO...."
    assert cut.env_step("6").reward == 0.5 * 0.5  # a cut game's value (a draw) is its result, weighted too
    for bad in (-0.1, 1.5):
        with pytest.raises(ValueError, match="outcome_weight"):
            TicTacToeEnv(outcome_weight=bad)


def test_start_board_starts_every_game_there_with_the_side_to_move_as_the_agent():
    # "XX.|OO.|..." has two marks each: X is to move, whatever agent_mark and the seed say.
    env = TicTacToeEnv(agent_mark="alternate", start_board="XX.OO....", agent_moves=1, move_shaping=0.4,
                       outcome_weight=0.0)
    for seed in (0, 1, 7):
        obs, info = env.env_reset(seed)
        assert env.board == "XX.OO...." and env.agent_mark == "X" and "opponent_move" not in info
        assert obs == "Board:\nXX3\nOO6\n789\nYou are X. Your move." and info["optimal_moves"] == [3]
    assert env.env_step("6").reward == pytest.approx(-0.4)  # the block: regret 1, and the cut game weighs 0
    o_env = TicTacToeEnv(agent_mark="X", start_board="X...O...X")  # three marks: O to move, agent_mark aside
    obs, _ = o_env.env_reset(3)
    assert o_env.agent_mark == "O" and "You are O." in obs and o_env.board == "X...O...X"
    out = o_env.env_step("2")  # a whole game goes on from there: the opponent (X) replies
    assert out.info["opponent_move"] in legal_moves("XO..O...X") and out.info["regret"] == 0


@pytest.mark.parametrize("bad,why", [("XXX......", "cannot occur"), ("OO.......", "cannot occur"),
                                     ("XXXOO....", "finished"), ("XOXXOOOXX", "finished"), ("XX", "9 cells"),
                                     (123, "start_board")])
def test_start_board_is_checked(bad, why):
    with pytest.raises(ValueError, match=why):
        TicTacToeEnv(start_board=bad)
    with pytest.raises(ValueError, match="exclude"):
        TicTacToeEnv(start_board="X........", random_start=1)

"""Exact win+draw against the random opponent: every opponent move enumerated.

The demo's evaluation plays 400 greedy games against `TicTacToeEnv`'s random opponent (a
uniformly random legal move) and reports the share won or drawn; that share estimates, to about
+-0.03, the expectation computed here without sampling. For a greedy policy whose move depends on
the board alone (the demo's one-observation context) the game tree has at most a few hundred
states to ask it about, so the exact number costs less than the 400 games.

    python -m ludic_core.envs.tic_tac_toe.exact MODEL_DIR ...
    python -m ludic_core.envs.tic_tac_toe.exact --heuristic '{"fallback": "centre"}'

prints it for models trained on the tic-tac-toe recipe's prompt (no system message, the latest
board only), the move read as the most likely cell digit after "<move>"; with `--heuristic KWARGS`
(JSON) or `--minimax`, for that scripted teacher's greedy play (the demo table's teacher row).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Callable, NoReturn, Sequence

from ludic_core.envs.tic_tac_toe.env import _parse_action, _prompt_obs
from ludic_core.envs.tic_tac_toe.players import heuristic_teacher, minimax_teacher
from ludic_core.envs.tic_tac_toe.rules import _check_mark, _other, _place, _winner, legal_moves
from ludic_core.parsers import xml_tag_parser

__all__ = ["BoardPolicy", "exact_win_draw", "model_board_policy", "chat_board_policy"]

#: The cells (1-9) a deterministic policy plays, as `mark`, on each board; None for a reply
#: that names no cell. A missing or occupied cell loses the game, as in the env.
BoardPolicy = Callable[[Sequence[str], str], Sequence["int | None"]]

#: The recipe's reader of a reply (the last `<move>...</move>`); the env then reads the cell.
_READ_MOVE = xml_tag_parser("move")


def exact_win_draw(policy: BoardPolicy, mark: str) -> float:
    """P(win or draw) of `policy` playing `mark` (X moves first) against a uniformly random
    opponent, summed over every opponent move; the policy is asked once per board, a layer of
    the game tree at a time (so a model scores each layer in one batch)."""
    _check_mark(mark, "mark")
    total, layer = 0.0, {"." * 9: 1.0}  # boards with `mark`... or the opponent to move, and their reach
    to_move = "X"
    while layer:
        nxt: dict[str, float] = {}
        if to_move == mark:
            boards = list(layer)
            for board, cell in zip(boards, policy(boards, mark), strict=True):
                if cell is None or not 1 <= cell <= 9 or board[cell - 1] != ".":
                    continue  # malformed or illegal: a loss
                after = _place(board, cell - 1, mark)
                if _winner(after) == mark or not legal_moves(after):
                    total += layer[board]
                else:
                    nxt[after] = nxt.get(after, 0.0) + layer[board]
        else:
            for board, reach in layer.items():
                moves = legal_moves(board)
                for cell in moves:
                    after = _place(board, cell - 1, to_move)
                    if _winner(after) == to_move:
                        continue  # the opponent won
                    if not legal_moves(after):
                        total += reach / len(moves)  # a draw
                    else:
                        nxt[after] = nxt.get(after, 0.0) + reach / len(moves)
        layer, to_move = nxt, _other(to_move)
    return total


def model_board_policy(model_dir: str) -> BoardPolicy:
    """A model's greedy cell on the tic-tac-toe recipe's prompt (the board alone, no system
    message): the most likely digit after "<move>", which is its greedy move whenever its greedy
    reply is well formed (the demo's legal-move rates say how often)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    digits = [tok.convert_tokens_to_ids(str(d)) for d in range(1, 10)]

    def policy(boards: Sequence[str], mark: str) -> list[int | None]:
        cells: list[int | None] = []
        for i in range(0, len(boards), 256):
            ids = [tok(_prompt(tok, b, mark), add_special_tokens=False)["input_ids"] for b in boards[i:i + 256]]
            width = max(map(len, ids))
            batch = torch.tensor([[tok.pad_token_id] * (width - len(x)) + x for x in ids])
            mask = torch.tensor([[0] * (width - len(x)) + [1] * len(x) for x in ids])
            positions = (mask.cumsum(-1) - 1).clamp(min=0)  # left padding must not shift the positions
            with torch.no_grad():
                logits = model(input_ids=batch, attention_mask=mask, position_ids=positions).logits[:, -1, digits]
            cells.extend(int(j) + 1 for j in logits.argmax(-1))
        return cells

    return policy


def chat_board_policy(player: Callable[[list[dict[str, Any]]], str]) -> BoardPolicy:
    """A scripted chat player's cell on each board, asked with the recipe's prompt and no
    temperature (a teacher's greedy move), its reply read as the game reads it (the recipe's
    `xml_tag` parser, then the env's cell check); None where the game would not take it."""
    def policy(boards: Sequence[str], mark: str) -> list[int | None]:
        cells: list[int | None] = []
        for board in boards:
            action = _READ_MOVE(player([{"role": "user", "content": _prompt_obs(board, mark)}])).action
            index = None if action is None else _parse_action(action, board)[0]
            cells.append(None if index is None else index + 1)
        return cells

    return policy


def _prompt(tok, board: str, mark: str) -> str:
    """The recipe's prompt for `board`, up to the digit of the move."""
    text = tok.apply_chat_template([{"role": "user", "content": _prompt_obs(board, mark)}], tokenize=False,
                                   add_generation_prompt=True)
    return str(text) + "<move>"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise SystemExit(f"{self.format_usage()}{self.prog}: {message}")


def main(argv: Sequence[str]) -> None:
    parser = _Parser(prog="python -m ludic_core.envs.tic_tac_toe.exact",
                     description="Exact win+draw against the random opponent, as X and as O.")
    parser.add_argument("models", nargs="*", metavar="MODEL_DIR", help="models trained on the recipe's prompt")
    teacher = parser.add_mutually_exclusive_group()
    teacher.add_argument("--heuristic", metavar="KWARGS", help="tic_tac_toe_heuristic's keyword arguments as JSON")
    teacher.add_argument("--minimax", action="store_true", help="the minimax teacher")
    args = parser.parse_args(list(argv))
    scripted = args.heuristic is not None or args.minimax
    if scripted == bool(args.models):
        parser.error("give MODEL_DIRs, or one scripted teacher (--heuristic KWARGS or --minimax), not both")
    if not scripted:
        rows = [(model_dir, model_board_policy(model_dir)) for model_dir in args.models]
    elif args.minimax:
        rows = [("minimax {}", chat_board_policy(minimax_teacher()))]
    else:
        try:
            kwargs = json.loads(args.heuristic)
        except ValueError as e:
            raise SystemExit(f"--heuristic takes its keyword arguments as a JSON object: {e}") from None
        if not isinstance(kwargs, dict):
            raise SystemExit(f"--heuristic takes a JSON object, got {type(kwargs).__name__}")
        try:
            player = heuristic_teacher(**kwargs)
        except (TypeError, ValueError) as e:
            raise SystemExit(f"--heuristic {args.heuristic}: {e}") from None
        rows = [(f"heuristic {json.dumps(kwargs, sort_keys=True)}", chat_board_policy(player))]
    for name, policy in rows:
        x, o = exact_win_draw(policy, "X"), exact_win_draw(policy, "O")
        print(f"{name}: exact win+draw vs the random opponent: X {x:.4f}, O {o:.4f}, mean {(x + o) / 2:.4f}")


if __name__ == "__main__":
    main(sys.argv[1:])

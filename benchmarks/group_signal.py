"""How much signal a start gives group-relative RL, before training on it.

GRPO's advantage is zero in a group whose episodes all end with the same
return. A confident SFT policy plays the same game in all G samples of a
seed, so most of a batch teaches nothing however long the run. This samples
`--groups` groups of `--group-size` episodes from the recipe's RL env (the
seeds a training run starts on) at each temperature and prints: groups with a
return spread (what GRPO trains on), groups whose samples differ at all, the
mean return, and the share of episodes that failed or did not parse.

    .venv/bin/python benchmarks/group_signal.py --recipe tic_tac_toe \
        --start runs/demo/tic_tac_toe-k64/sft/checkpoints/step_00000800/model \
        [--temperatures 0.7 1.0 1.5] [--groups 64] [--group-size 8] [--env-kwarg move_shaping=0.5]
    .venv/bin/python benchmarks/group_signal.py --smoke   # CI: a random-weights tiny model, 2 groups of 2
"""

from __future__ import annotations

from ludic_core import openmp

openmp.configure()  # first: OpenMP's spin-wait, set before torch loads (ludic_core/openmp.py)

import argparse
import asyncio
import tempfile
from collections import defaultdict


def group_signal_table(recipe, start: str, temperatures: list[float], groups: int, group_size: int,
                       first_seed: int = 1_000) -> list[dict[str, float]]:
    from ludic_core.batching.sources import group_signal
    from ludic_core.compose.build import build_engine, episode_requests
    from ludic_core.inference import LocalChatClient
    from ludic_core.rollout import GRPORequestStrategy

    client = LocalChatClient(start)
    rows = []
    for t in temperatures:
        sampling = recipe.agent.sampling.model_copy(update={"temperature": t})
        engine = build_engine(recipe.rl_env, recipe.agent, client)
        requests = episode_requests(recipe.rl_env, recipe.agent, list(range(first_seed, first_seed + groups)),
                                    sampling=sampling)
        rollouts = asyncio.run(engine.generate_rollouts(requests, max_steps=recipe.agent.max_turns,
                                                        strategy=GRPORequestStrategy(group_size, seed=0)))
        games = defaultdict(set)
        for r in rollouts:
            games[r.meta["group_id"]].add(tuple(s.action for s in r.steps))
        ok = [r for r in rollouts if not r.failed]
        parse_errors = sum(any(s.info.get("parse_error") for s in r.steps) for r in ok)
        rows.append({"temperature": t, "groups": float(len(games)),
                     "signal_groups": group_signal(rollouts).get("signal_groups", 0.0),
                     "differing_groups": float(sum(len(v) > 1 for v in games.values())),
                     "mean_return": sum(r.total_reward for r in ok) / max(len(ok), 1),
                     "failed_or_unparsed": (len(rollouts) - len(ok) + parse_errors) / max(len(rollouts), 1)})
    return rows


def main() -> None:
    from ludic_core.recipes.recipe import get_recipe

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--recipe", default="tic_tac_toe")
    ap.add_argument("--start", help="model directory (an SFT checkpoint's model/); required unless --smoke")
    ap.add_argument("--temperatures", type=float, nargs="+", default=[0.7, 1.0, 1.5])
    ap.add_argument("--groups", type=int, default=64)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--env-kwarg", action="append", default=[], metavar="KEY=JSON",
                    help="a kwarg of the env sampled from, e.g. move_shaping=0.5")
    ap.add_argument("--smoke", action="store_true",
                    help="CI: 2 groups of 2 at T=0 and T=2 from a random-weights tiny-1m built here "
                         "(unless --start); proves the code path")
    args = ap.parse_args()
    if args.smoke:
        args.temperatures, args.groups, args.group_size = [0.0, 2.0], 2, 2
    elif not args.start:
        ap.error("--start is required (or --smoke)")
    if args.groups < 1 or args.group_size < 2:
        ap.error(f"need --groups >= 1 and --group-size >= 2, got {args.groups} and {args.group_size}")
    from algorithms import parse_key_json, with_env_kwargs  # this script's directory is on sys.path

    recipe = with_env_kwargs(get_recipe(args.recipe), parse_key_json(args.env_kwarg, ap.error))
    with tempfile.TemporaryDirectory(prefix="ludic-group-signal-") as tmp:
        if not args.start:  # --smoke
            from ludic_core.models import build_tiny_model

            args.start = str(build_tiny_model(f"{tmp}/tiny-1m", "tiny-1m", seed=0))
        rows = group_signal_table(recipe, args.start, args.temperatures, args.groups, args.group_size)
    print(f"\n{args.recipe} from {args.start}: {args.groups} groups of {args.group_size}")
    print(f"{'temperature':>11} {'with a return spread':>21} {'samples differ':>15} {'mean return':>12} "
          f"{'failed/unparsed':>16}")
    for r in rows:
        print(f"{r['temperature']:>11.2f} {int(r['signal_groups']):>14} of {int(r['groups']):<4} "
              f"{int(r['differing_groups']):>15} {r['mean_return']:>12.3f} {r['failed_or_unparsed']:>16.3f}")
    for r in rows:
        print(f"ratio (groups with a return spread / all groups) at T={r['temperature']:.2f}: "
              f"{r['signal_groups'] / r['groups']:.2f}x")


if __name__ == "__main__":
    main()

"""reasoning-gym as an env family: configs checked up front, the seed picks the
entry, the task's own scorer gives the reward, and no answer can crash a rollout."""

import builtins
import inspect
import re
from collections import Counter

import pytest

import reasoning_gym as rg
from ludic_core.envs.reasoning_gym import EVAL_SCORERS, ReasoningGymEnv, reasoning_gym_answer, task_names
from ludic_core.envs.reasoning_gym import tasks as rgt

MIX = {"basic_arithmetic": 1.0, "base_conversion": 0.5}


def _play(env, seed, answer):
    obs, info = env.reset(seed=seed)["agent_0"]
    return obs, info, env.step({"agent_0": answer})["agent_0"]


def _teacher_text(teacher, question):
    return teacher([{"role": "user", "content": question}])


# ------------------------------------------------------------------ configs

@pytest.mark.parametrize("kwargs, match", [
    ({"tasks": {"basic_arithmetc": 1.0}}, r"unknown task 'basic_arithmetc'; did you mean 'basic_arithmetic'"),
    ({"tasks": {"basic_arithmetic": -1.0}}, r"task 'basic_arithmetic' has weight -1.0; a weight must be a finite "
                                            r"number > 0"),
    ({"tasks": {"basic_arithmetic": float("nan")}}, r"has weight nan"),
    ({"tasks": {"basic_arithmetic": True}}, r"has weight True"),
    ({"tasks": {}}, r"tasks must be a task name, a list of names or \{name: weight\}, and not empty"),
    ({"tasks": ["gcd", "gcd"]}, r"tasks lists 'gcd' twice"),
    ({"tasks": "composite"}, r"unknown task 'composite'"),
    ({"tasks": "countdown"}, r"task 'countdown': its score_answer runs the answer text through Python eval"),
    ({"tasks": "gcd", "config": {"lcm": {}}}, r"config names task 'lcm', which is not in tasks \['gcd'\]"),
    ({"tasks": "gcd", "config": {"gcd": {"seed": 3}}}, r"config\['gcd'\] sets 'seed'; the env's own `seed`"),
    ({"tasks": "gcd", "config": {"gcd": {"max_numbers": 1}}}, r"task 'gcd' rejects config .*AssertionError"),
    ({"tasks": "gcd", "config": {"gcd": {"nope": 1}}}, r"task 'gcd' rejects config .*unexpected keyword "
                                                       r"argument 'nope'"),
    ({"tasks": "gcd", "size": 0}, r"size must be an int in \[1, 1,000,000\], got 0"),
    ({"tasks": "gcd", "score_timeout": 0}, r"score_timeout must be seconds"),
])
def test_a_bad_config_is_an_error_naming_the_problem(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ReasoningGymEnv(**kwargs)


def test_the_preflight_names_a_bad_task_before_any_episode():
    from ludic_core.compose.build import check_env
    from ludic_core.compose.configs import EnvConfig
    from ludic_core.registry import ComponentError

    check_env(EnvConfig(name="reasoning_gym", kwargs={"tasks": MIX}))
    with pytest.raises(ComponentError, match=r"env 'reasoning_gym' failed to build .*unknown task 'sudokuu'"):
        check_env(EnvConfig(name="reasoning_gym", kwargs={"tasks": {"sudokuu": 1}}))


# ------------------------------------------------------------------ which entry a seed plays

def test_the_env_seed_picks_the_entry_deterministically():
    a, b = ReasoningGymEnv(tasks=MIX), ReasoningGymEnv(tasks=dict(MIX))
    firsts = [a.reset(seed=s)["agent_0"] for s in range(40)]
    assert firsts == [b.reset(seed=s)["agent_0"] for s in range(40)]  # a fresh env, the same entries
    assert len({q for q, _ in firsts}) > 35
    held_out = ReasoningGymEnv(tasks=MIX, seed=1)
    assert sum(held_out.reset(seed=s)["agent_0"][0] == firsts[s][0] for s in range(40)) < 10
    # the entry is reasoning-gym's own: its dataset with the documented seed, entry seed % size
    q, info = ReasoningGymEnv(tasks="gcd", size=7).reset(seed=23)["agent_0"]
    ds = rg.create_dataset("gcd", seed=rgt.dataset_seed(0, "gcd"), size=7)
    assert info == {"task": "gcd", "index": 23 % 7} and q == ds[23 % 7]["question"]


def test_mix_weights_decide_how_often_each_task_is_played():
    env = ReasoningGymEnv(tasks={"gcd": 3.0, "lcm": 1.0, "count_bits": 1.0})
    counts = Counter(env.reset(seed=s)["agent_0"][1]["task"] for s in range(3000))
    # expected 3000 x (3, 1, 1)/5 = 1800, 600, 600; sd about 27, 22, 22
    assert abs(counts["gcd"] - 1800) < 110 and abs(counts["lcm"] - 600) < 90 and abs(counts["count_bits"] - 600) < 90
    single = ReasoningGymEnv(tasks=["gcd"])
    assert {single.reset(seed=s)["agent_0"][1]["task"] for s in range(20)} == {"gcd"}


def test_a_task_config_reaches_reasoning_gyms_generator():
    small = {"min_terms": 2, "max_terms": 2, "max_digits": 1, "operators": ["+"], "allow_negation": False,
             "allow_parentheses": False}
    env = ReasoningGymEnv(tasks="basic_arithmetic", config={"basic_arithmetic": small})
    for s in range(30):
        q = env.reset(seed=s)["agent_0"][0]
        assert re.fullmatch(r"Calculate \d+ \+ \d+\.", q) and max(map(int, re.findall(r"\d+", q))) <= 10, q


# ------------------------------------------------------------------ rewards

def test_the_reward_is_the_tasks_own_score_answer():
    env = ReasoningGymEnv(tasks=MIX)
    for seed in range(12):
        q, info, out = _play(env, seed, "7")
        entry = rgt.entry(env.mix, info["task"], info["index"])
        assert out.reward == rg.get_score_answer_fn(info["task"])("7", entry)
        assert out.info["score"] == out.reward and out.info["task"] == info["task"] and out.terminated
        _, _, right = _play(env, seed, entry["answer"])
        assert right.reward == 1.0 and right.obs == "Correct."
        # the default scorer gives partial credit for the answer inside more text: the reward is that
        padded = f"{entry['answer']} !"
        partial = _play(env, seed, padded)[2].reward
        assert partial == rg.get_score_answer_fn(info["task"])(padded, entry) and 0 < partial < 1


def test_the_teacher_answers_every_entry_with_reward_1():
    for tasks, tag in ((MIX, "answer"), (["gcd", "spell_backward", "caesar_cipher"], None)):
        env, teacher = ReasoningGymEnv(tasks=tasks, size=500), reasoning_gym_answer(tasks=tasks, size=500, tag=tag)
        for seed in range(0, 1000, 7):  # past `size`: seeds wrap around the entries
            q = env.reset(seed=seed)["agent_0"][0]
            reply = _teacher_text(teacher, q)
            answer = reply.removeprefix("<answer>").removesuffix("</answer>") if tag else reply
            assert tag is None or reply.startswith("<answer>")
            assert env.step({"agent_0": answer})["agent_0"].reward == 1.0, (q, reply)


def test_the_teacher_fails_loudly_on_a_question_it_does_not_know():
    teacher = reasoning_gym_answer(tasks="gcd", size=50)
    with pytest.raises(ValueError, match="is not in tasks \\['gcd'\\]"):
        _teacher_text(teacher, "What is 2 + 2?")
    other_seed = ReasoningGymEnv(tasks="gcd", size=50, seed=5).reset(seed=3)["agent_0"][0]
    with pytest.raises(ValueError, match="the teacher needs the env's tasks, config, size and seed"):
        _teacher_text(teacher, other_seed)


# ------------------------------------------------------------------ hostile answers

def test_a_scorer_that_raises_gives_0_with_the_reason():
    env = ReasoningGymEnv(tasks="prime_factorization")
    q, info, out = _play(env, 0, "((((")  # prime_factorization's scorer raises ValueError on this
    entry = rgt.entry(env.mix, "prime_factorization", info["index"])
    with pytest.raises(ValueError):
        rg.get_score_answer_fn("prime_factorization")("((((", entry)
    assert out.reward == 0.0 and out.terminated
    assert out.info["score_error"].startswith("score_answer raised ValueError")
    assert _play(env, 0, entry["answer"])[2].reward == 1.0  # the env scores on after it


def test_an_overlong_answer_scores_0_unread():
    env = ReasoningGymEnv(tasks="gcd", max_answer_chars=10)
    out = _play(env, 0, "1" * 11)[2]
    assert out.reward == 0.0 and "at most 10 are scored" in out.info["score_error"]


def test_an_answer_that_would_run_for_hours_is_cut_at_the_deadline():
    # coin_flip's scorer turns "1e999999999" into an exact Fraction: a billion-digit integer
    env = ReasoningGymEnv(tasks="coin_flip", score_timeout=1.0)
    out = _play(env, 0, "1e999999999")[2]
    assert out.reward == 0.0 and "took longer than 1 s" in out.info["score_error"]
    entry = rgt.entry(env.mix, "coin_flip", 1)
    assert _play(env, 1, entry["answer"])[2].reward == 1.0  # a fresh scorer took over


def test_the_policys_text_never_runs_as_code():
    builtins._rg_canary = []
    canary = "__import__('builtins')._rg_canary.append(1)"
    env = ReasoningGymEnv(tasks="spiral_matrix", allow_eval_scorers=True)  # its scorer evals a non-exact answer
    out = _play(env, 0, canary)[2]
    assert out.reward == 0.0 and builtins._rg_canary == []  # scored in the child process, not here
    assert rg.get_score_answer_fn("spiral_matrix")(canary, rgt.entry(env.mix, "spiral_matrix", 0)) == 0.0
    assert builtins._rg_canary == [1]  # in-process it would have run


# ------------------------------------------------------------------ the list of eval-ing scorers

_EVALISH = re.compile(r"\beval\(|\bexec\(|parse_expr|sympify|\bcompile\(")
# Scorers that call eval on the entry's own data, never on the answer (read in reasoning-gym 0.1.25).
_EVALS_ONLY_THE_ENTRY = {"bitwise_arithmetic", "number_sorting"}


def _scorer_sources(cls):
    """score_answer's source, and that of the functions and methods it calls by name (one level)."""
    fn = cls.score_answer
    src = inspect.getsource(fn)
    module = inspect.getmodule(fn)
    out = [src]
    for name in set(re.findall(r"(?<![\w.])(\w+)\(", src)) | set(re.findall(r"self\.(\w+)\(", src)):
        target = getattr(cls, name, None) or getattr(module, name, None)
        if inspect.isfunction(target) and inspect.getmodule(target) is module:
            out.append(inspect.getsource(target))
    return "\n".join(out)


def test_every_task_whose_scorer_evals_is_listed():
    from reasoning_gym.dataset import ProceduralDataset
    from reasoning_gym.factory import DATASETS

    flagged = {name for name in task_names() if DATASETS[name][0].score_answer is not ProceduralDataset.score_answer
               and _EVALISH.search(_scorer_sources(DATASETS[name][0]))}
    assert flagged - _EVALS_ONLY_THE_ENTRY == EVAL_SCORERS
    assert len(task_names()) == 105 and not EVAL_SCORERS - set(task_names())


@pytest.mark.slow
def test_no_unlisted_scorer_runs_the_answer_as_code():
    """Each task's scorer, fed answers that run code if evaluated (in-process, on purpose)."""
    canaries = ["__import__('builtins')._rg_canary.append(1)", "[__import__('builtins')._rg_canary.append(1)]",
                "(__import__('builtins')._rg_canary.append(1))*x"]
    ran = set()
    for name in task_names():
        builtins._rg_canary = []
        ds = rg.create_dataset(name, size=1, seed=0)
        for answer in canaries:
            try:
                ds.score_answer(answer, ds[0])
            except Exception:
                pass
        if builtins._rg_canary:
            ran.add(name)
    assert ran == EVAL_SCORERS

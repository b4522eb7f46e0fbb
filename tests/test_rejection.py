"""Rejection sampling's keep rules and dataset: chats always, exact ids only for the student's tokenizer."""

import pytest

from ludic_core.rejection import KeepRule, keep_episodes, load_sft_items, rollouts_to_dataset, save_dataset
from ludic_core.types import Rollout, Step, TokenTrace


def _episode(group, ret, replies=("a",), failed=False, parse_error=False):
    steps = [Step(index=i, prev_obs=f"q{i}", action=r, next_obs=None, reward=ret if i == len(replies) - 1 else 0.0,
                  info={"prompt_messages": [{"role": "user", "content": f"q{i}"}], "parse_error": parse_error},
                  trace=TokenTrace(prompt_token_ids=[1, 2], completion_token_ids=[3, 4]))
             for i, r in enumerate(replies)]
    return Rollout(steps=steps, meta={"group_id": group, **({"failed": True} if failed else {})})


def test_keep_rules_by_hand():
    eps = [_episode("g1", 1.0, ("x",)), _episode("g1", 0.5, ("y",)), _episode("g1", 1.0, ("x",)),
           _episode("g2", 0.0, ("z",)), _episode("g2", 0.5, ("w",)), _episode("g3", 1.0, failed=True)]
    kept, stats = keep_episodes(eps, KeepRule(min_return=0.5))
    assert kept == eps[:3] + [eps[4]]
    # 6 sampled, 1 failed; mean return over the 5 finished: (1 + .5 + 1 + 0 + .5) / 5 = 0.6
    assert stats == {"sampled": 6.0, "failed": 1.0, "kept": 4.0, "keep_rate": 4 / 6, "mean_return": 0.6}
    best, _ = keep_episodes(eps, KeepRule(best_of_group=True))
    assert best == [eps[0], eps[4]]  # g1's first best (ties keep the first), g2's 0.5; g3 failed
    unique, _ = keep_episodes(eps, KeepRule(dedupe=True))
    assert unique == [eps[0], eps[1], eps[3], eps[4]]  # eps[2] repeats eps[0] turn for turn
    assert keep_episodes(eps, KeepRule(min_return=2.0))[0] == []


def test_dataset_rows_are_model_calls_with_messages(tmp_path):
    eps = [_episode("g", 1.0, ("r0", "r1")), _episode("h", 1.0, ("bad",), parse_error=True)]
    ds = rollouts_to_dataset(eps, tokenizer="fp")
    assert len(ds) == 2  # the unparseable reply is not worth imitating
    assert ds[1]["messages"] == [{"role": "user", "content": "q1"}, {"role": "assistant", "content": "r1"}]
    assert ds[1]["completion_token_ids"] == [3, 4] and ds[1]["tokenizer"] == "fp" and ds[1]["group_id"] == "g"
    no_ids = rollouts_to_dataset(eps, tokenizer=None)
    assert no_ids[0]["completion_token_ids"] == [] and no_ids[0]["tokenizer"] == ""


def test_sft_uses_exact_ids_only_when_the_tokenizer_is_the_students(tiny_model_and_tokenizer, tmp_path):
    from ludic_core.models import build_byte_tokenizer, tokenizer_fingerprint

    _, tok = tiny_model_and_tokenizer
    reply = "<move>5</move>"
    chat = [{"role": "user", "content": "Board?"}]
    prompt_ids = tok.encode(tok.apply_chat_template(chat, add_generation_prompt=True, tokenize=False),
                            add_special_tokens=False)
    completion = tok.encode(reply, add_special_tokens=False) + [tok.eos_token_id]
    step = Step(index=0, prev_obs="Board?", action=reply, next_obs=None, reward=1.0,
                info={"prompt_messages": chat}, trace=TokenTrace(prompt_ids, completion))
    episode = Rollout(steps=[step])
    same = save_dataset(rollouts_to_dataset([episode], tokenizer=tokenizer_fingerprint(tok)), tmp_path / "same")
    items, used = load_sft_items(same, tok)
    assert used == "tokens" and items[0].input_ids == prompt_ids + completion

    other = build_byte_tokenizer()
    other.chat_template = "{% for m in messages %}[{{ m['role'] }}]{{ m['content'] }}{% endfor %}"
    assert tokenizer_fingerprint(other) != tokenizer_fingerprint(tok)
    foreign = save_dataset(rollouts_to_dataset([episode], tokenizer=tokenizer_fingerprint(other)), tmp_path / "f")
    items, used = load_sft_items(foreign, tok)
    # rendered with the student's own template: the same ids as the student would have produced
    assert used == "messages" and items[0].input_ids == prompt_ids + completion
    assert sum(items[0].action_mask) == len(completion)
    with pytest.raises(ValueError, match="use must be"):
        load_sft_items(foreign, tok, use="bytes")
    with pytest.raises(FileNotFoundError, match="no dataset at"):
        load_sft_items(tmp_path / "nothing", tok)


def test_fingerprint_sees_vocabulary_and_template_not_the_pad_token():
    from ludic_core.models import build_byte_tokenizer, tokenizer_fingerprint

    base = tokenizer_fingerprint(build_byte_tokenizer())
    padded = build_byte_tokenizer()
    padded.pad_token = padded.eos_token  # what loaders do for a model without a pad token
    assert tokenizer_fingerprint(padded) == base
    bigger = build_byte_tokenizer()
    bigger.add_tokens(["<extra>"])
    templated = build_byte_tokenizer()
    templated.chat_template = "{{ messages[0]['content'] }}"
    assert len({base, tokenizer_fingerprint(bigger), tokenizer_fingerprint(templated)}) == 3


def test_a_parser_that_refuses_the_teachers_answers_is_named_when_nothing_is_kept(tiny_model_and_tokenizer, tmp_path):
    """The trap of `--example`'s values alone: the arithmetic oracle with the default agent
    (identity parser) scores nothing; the error says what was sampled and why."""
    from ludic_core.compose.configs import AgentConfig
    from ludic_core.compose.policy import ScriptedPolicy, scripted_client
    from ludic_core.recipes.arithmetic import RECIPE
    from ludic_core.rejection_sampling import rejection_sample

    _, tok = tiny_model_and_tokenizer
    client, fp = scripted_client(ScriptedPolicy(policy=RECIPE.teacher, kwargs=RECIPE.teacher_kwargs), tok)
    run = dict(seeds=range(6), samples=1, keep=KeepRule(min_return=1.0), out_dir=tmp_path / "rs", fingerprint=fp)
    with pytest.raises(ValueError, match=r"kept nothing: 6 episodes sampled, 0 failed, mean return 0, .*the "
                                         r"agent's parser \(identity\) refused 0% .*format the agent's parser"):
        rejection_sample(client, RECIPE.env, AgentConfig(), **run)
    assert not (tmp_path / "rs" / "dataset").exists()
    done = rejection_sample(client, RECIPE.env, RECIPE.agent, **run)  # the recipe's agent reads its teacher
    assert done["kept"] == 6


def _tool_step(calls, traces):
    info = {"prompt_messages": [{"role": "user", "content": "q"}], "tools_offered": ["calc"],
            "internal_calls": calls, "internal_traces": [t.to_dict() for t in traces]}
    return Rollout(steps=[Step(index=0, prev_obs="q", action="<a>5</a>", next_obs=None, reward=1.0, info=info,
                               trace=TokenTrace(prompt_token_ids=[9], completion_token_ids=[5]))])


def test_each_tool_calling_turn_is_a_row_with_its_own_ids():
    calls = [{"prompt_messages": [{"role": "user", "content": "q"}], "text": "call-1", "has_ids": False},
             {"prompt_messages": [{"role": "user", "content": "q"}, {"role": "tool", "content": "x"}],
              "text": "call-2", "has_ids": True}]
    ds = rollouts_to_dataset([_tool_step(calls, [TokenTrace(prompt_token_ids=[7], completion_token_ids=[2])])],
                             tokenizer="fp")
    assert ds["completion_text"] == ["call-1", "call-2", "<a>5</a>"]
    # the first call carried no ids: its row has none, and the trace goes to the call that made it
    assert ds["completion_token_ids"] == [[], [2], [5]] and ds["prompt_token_ids"] == [[], [7], [9]]
    assert ds["tools"] == ["calc"] * 3
    assert ds[1]["messages"][-2] == {"role": "tool", "content": "x"}
    with pytest.raises(ValueError, match="2 tool-calling turns recorded with 0 token traces"):
        rollouts_to_dataset([_tool_step([{**c, "has_ids": True} for c in calls], [])], tokenizer="fp")

"""SFT items from chat messages: which tokens are trained, readers, and every error path."""

import json

import pytest

from ludic_core.batching.chat import chat_items, chat_to_item, read_chat_examples
from ludic_core.batching.saw import SAWItem
from ludic_core.batching.sources import chat_example_to_item
from ludic_core.models import build_byte_tokenizer

EOS = "<|im_end|>"
TWO_TURNS = [
    {"role": "system", "content": "SYSTEM-RULES"},
    {"role": "user", "content": "QUESTION-ONE"},
    {"role": "assistant", "content": "answer one"},
    {"role": "user", "content": "QUESTION-TWO"},
    {"role": "assistant", "content": "answer two"},
]
TOOL_CHAT = [
    {"role": "user", "content": "add 1 and 2"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"type": "function", "function": {"name": "add", "arguments": {"a": 1, "b": 2}}}]},
    {"role": "tool", "content": "TOOL-RESULT-3", "tool_call_id": "c0"},
    {"role": "assistant", "content": "it is 3"},
]


@pytest.fixture(scope="module")
def tok(tiny_model_and_tokenizer):
    return tiny_model_and_tokenizer[1]


def _trained_runs(item: SAWItem) -> list[list[int]]:
    runs, run = [], []
    for i, m in zip(item.input_ids, item.action_mask):
        if m:
            run.append(i)
        elif run:
            runs.append(run)
            run = []
    return runs + ([run] if run else [])


def _untrained(item: SAWItem) -> list[int]:
    return [i for i, m in zip(item.input_ids, item.action_mask) if not m]


def _old_chat_example_to_item(messages, tokenizer) -> SAWItem:
    """The single-turn implementation chat_to_item replaced, kept verbatim as the reference."""
    prompt_text = tokenizer.apply_chat_template(list(messages[:-1]), add_generation_prompt=True, tokenize=False)
    prompt = list(tokenizer.encode(prompt_text, add_special_tokens=False))
    completion = list(tokenizer.encode(messages[-1]["content"] or "", add_special_tokens=False))
    completion.append(tokenizer.eos_token_id)
    return SAWItem(prompt + completion, [1] * (len(prompt) + len(completion)),
                   [0] * len(prompt) + [1] * len(completion), 1.0, {})


def test_every_assistant_turn_is_trained_content_plus_eos_only(tok):
    item = chat_to_item(TWO_TURNS, tok, meta={"k": 1})
    dec = lambda ids: tok.decode(ids, skip_special_tokens=False)  # noqa: E731
    assert [dec(r) for r in _trained_runs(item)] == [f"answer one{EOS}", f"answer two{EOS}"]
    context = dec(_untrained(item))
    for text in ("SYSTEM-RULES", "QUESTION-ONE", "QUESTION-TWO"):
        assert text in context
    # The "\n" after the first eos is context before turn two; the one after the last is dropped.
    full = tok.apply_chat_template(TWO_TURNS, tokenize=False)
    assert dec(item.input_ids) == full.removesuffix("\n")
    assert item.attention_mask == [1] * len(item) and item.weight == 1.0 and item.meta == {"k": 1}


@pytest.mark.parametrize("messages", [
    [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "<answer>4</answer>"}],
    [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"},
     {"role": "assistant", "content": ""}],
])
def test_single_turn_equals_the_old_final_message_item(tok, messages):
    old = _old_chat_example_to_item(messages, tok)
    for new in (chat_to_item(messages, tok), chat_example_to_item(messages, tok)):
        assert (new.input_ids, new.action_mask, new.attention_mask) == (old.input_ids, old.action_mask,
                                                                        old.attention_mask)


def test_tool_call_turns_are_trained_and_tool_results_are_context(tok):
    item = chat_to_item(TOOL_CHAT, tok)
    runs = [tok.decode(r, skip_special_tokens=False) for r in _trained_runs(item)]
    assert runs == ['<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call>' + EOS, f"it is 3{EOS}"]
    assert "TOOL-RESULT-3" in tok.decode(_untrained(item), skip_special_tokens=False)


def _write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_jsonl_round_trip(tmp_path, tok):
    path = _write_jsonl(tmp_path / "chats.jsonl", [{"messages": TWO_TURNS, "id": "a"}, {"messages": TOOL_CHAT}])
    with path.open("a") as f:
        f.write("\n")  # blank lines are skipped
    assert read_chat_examples(path) == [TWO_TURNS, TOOL_CHAT]
    items = chat_items(path, tok)
    assert [it.meta for it in items] == [{"row": 0}, {"row": 1}]
    assert items[1].input_ids == chat_to_item(TOOL_CHAT, tok).input_ids


def test_save_to_disk_round_trip_restores_absent_keys(tmp_path, tok):
    import datasets

    # Arrow gives every message every key (tool_calls, tool_call_id, other tools' arguments) as null.
    other = [{"role": "user", "content": "x"}, {"role": "assistant", "content": None, "tool_calls": [
        {"type": "function", "function": {"name": "neg", "arguments": {"z": -1}}}]}]
    rows = [{"messages": TWO_TURNS}, {"messages": TOOL_CHAT}, {"messages": other}]
    datasets.Dataset.from_list(rows).save_to_disk(str(tmp_path / "ds"))
    assert read_chat_examples(tmp_path / "ds") == [TWO_TURNS, TOOL_CHAT, other]
    jsonl = chat_items(_write_jsonl(tmp_path / "c.jsonl", rows[:2]), tok)
    assert [it.input_ids for it in chat_items(tmp_path / "ds", tok)[:2]] == [it.input_ids for it in jsonl]


@pytest.mark.parametrize("messages, match", [
    ({"role": "user"}, "'messages' is a dict, not a list"),
    ([], "'messages' is empty"),
    (["hi"], "message 0 is a str"),
    ([{"role": "user", "content": "q"}, {"role": "bot", "content": "a"}], "message 1 has role 'bot'"),
    ([{"from": "human", "value": "q"}], "ShareGPT"),
    ([{"role": "user"}, {"role": "assistant", "content": "a"}], r"message 0 \(user\) has no 'content'"),
    ([{"role": "user", "content": ["q"]}, {"role": "assistant", "content": "a"}], "content of type list"),
    (TWO_TURNS[:4], "must end with an assistant message.*message 3, has role 'user'"),
])
def test_bad_messages_are_named(tok, messages, match):
    with pytest.raises(ValueError, match=match):
        chat_to_item(messages, tok)


def _tokenizer_with(template: str):
    tok = build_byte_tokenizer()
    tok.chat_template = template
    return tok


def test_template_that_rewrites_earlier_turns_is_reported():
    # Earlier assistant turns render shortened, as templates that strip old reasoning do.
    tok = _tokenizer_with(
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
        "{% if m['role'] == 'assistant' and not loop.last %}[...]{% else %}{{ m['content'] }}{% endif %}"
        "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    chat_to_item(TWO_TURNS[:3], tok)  # one turn: nothing rewritten
    with pytest.raises(ValueError, match="template problem at assistant message 2.*not a prefix"):
        chat_to_item(TWO_TURNS, tok)


def test_template_without_eos_is_reported():
    tok = _tokenizer_with("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}\n{% endfor %}"
                          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    with pytest.raises(ValueError, match=r"assistant message 2.*'answer one\\n', without the eos token"):
        chat_to_item(TWO_TURNS, tok)


def test_jsonl_errors_name_path_and_line(tmp_path, tok):
    good = json.dumps({"messages": TWO_TURNS})
    cases = [
        ("{not json", "bad.jsonl:2: not valid JSON"),
        (json.dumps([1]), "bad.jsonl:2: a row is a list"),
        (json.dumps({"msgs": []}), r"bad.jsonl:2: no 'messages' field \(keys: \['msgs'\]\)"),
        (json.dumps({"messages": "hi"}), "bad.jsonl:2: 'messages' is a str, not a list"),
        (json.dumps({"messages": [{"role": "human", "content": "q"}]}), "bad.jsonl:2: message 0 has role 'human'"),
    ]
    for line, match in cases:
        (tmp_path / "bad.jsonl").write_text(f"{good}\n{line}\n")
        with pytest.raises(ValueError, match=match):
            read_chat_examples(tmp_path / "bad.jsonl")
    _write_jsonl(tmp_path / "c.jsonl", [{"messages": TWO_TURNS}, {"messages": TWO_TURNS[:2]}])
    with pytest.raises(ValueError, match="c.jsonl row 1: a chat must end with an assistant message"):
        chat_items(tmp_path / "c.jsonl", tok)
    with pytest.raises(FileNotFoundError, match="no chat data at .*missing.jsonl"):
        read_chat_examples(tmp_path / "missing.jsonl")


def test_dataset_dir_errors_name_path_and_row(tmp_path):
    import datasets

    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="empty is a directory but not a datasets.save_to_disk dataset"):
        read_chat_examples(tmp_path / "empty")
    datasets.Dataset.from_list([{"text": "x"}]).save_to_disk(str(tmp_path / "text"))
    with pytest.raises(ValueError, match=r"text: dataset has no 'messages' column \(columns: \['text'\]\)"):
        read_chat_examples(tmp_path / "text")
    bad = [{"messages": TWO_TURNS}, {"messages": [{"role": "gpt", "content": "a"}]}]
    datasets.Dataset.from_list(bad).save_to_disk(str(tmp_path / "bad"))
    with pytest.raises(ValueError, match="bad row 1: message 0 has role 'gpt'"):
        read_chat_examples(tmp_path / "bad")
    datasets.DatasetDict({"train": datasets.Dataset.from_list(bad[:1])}).save_to_disk(str(tmp_path / "dd"))
    with pytest.raises(ValueError, match=r"dd holds splits \['train'\]; pass one split's directory"):
        read_chat_examples(tmp_path / "dd")

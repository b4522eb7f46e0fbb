"""SFT items from chat `messages` (the Hugging Face convention), trained on every assistant turn.

Why render prefixes instead of parsing the template's output: chat templates differ
(ChatML, Llama 3 headers, tool-call formats), but all honest ones share a property we can
check. Rendering messages[:i] with the generation prompt is exactly the text the model
sees before it writes turn i; rendering messages[:i+1] adds exactly what it writes. Their
difference is the assistant span, whatever the template. A template that rewrites history
(e.g. drops earlier turns' reasoning) breaks the property and is reported, not mis-masked.

The trained tokens of a turn are what the model must generate at inference: the rendered
turn up to and including eos, where generation stops. Whatever the template puts after eos
(ChatML's "\\n") is context for the next turn, never a target; after the last turn it is
dropped. Text is encoded piece by piece (context, turn, context, ...), as a prompt and its
completion are at inference, so a single-turn chat gives `prompt ids + content ids + eos`.

Message text is encoded as text (`inference.chat_render`): a dataset row whose assistant
turn spells `<|im_end|>` or `<|im_start|>` trains on those characters, never on the
special ids, so the trained span holds one special id, the turn's own eos.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

from ludic_core.batching.saw import SAWItem
from ludic_core.inference.chat_render import render_chat
from ludic_core.jsonl import iter_jsonl
from ludic_core.saved_dataset import load_saved_dataset

__all__ = ["ROLES", "validate_messages", "chat_to_item", "read_chat_examples", "dataset_chats", "chat_items",
           "chats_to_items"]

ROLES = ("system", "developer", "user", "assistant", "tool")


def validate_messages(messages: Any, where: str = "chat") -> None:
    """Raise a ValueError naming `where` and the message index for anything a template would choke on."""
    if not isinstance(messages, (list, tuple)):
        raise ValueError(f"{where}: 'messages' is a {type(messages).__name__}, not a list")
    if not messages:
        raise ValueError(f"{where}: 'messages' is empty")
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping):
            raise ValueError(f"{where}: message {i} is a {type(m).__name__}, not an object with 'role' and 'content'")
        role = m.get("role")
        if role not in ROLES:
            hint = " (ShareGPT-style 'from'/'value' keys? rename them to 'role'/'content')" if "from" in m else ""
            raise ValueError(f"{where}: message {i} has role {role!r}; expected one of {ROLES}{hint}")
        content = m.get("content")
        if content is None and not (role == "assistant" and m.get("tool_calls")):
            raise ValueError(f"{where}: message {i} ({role}) has no 'content' (only assistant tool calls may omit it)")
        if content is not None and not isinstance(content, str):
            raise ValueError(f"{where}: message {i} ({role}) has content of type {type(content).__name__}, not str")


def _render(tokenizer: Any, messages: Sequence[Mapping[str, Any]], generation_prompt: bool) -> str:
    """Text only, to locate a turn; ids always come from `render_chat`."""
    return tokenizer.apply_chat_template(list(messages), add_generation_prompt=generation_prompt, tokenize=False)


def _assistant_span(tokenizer: Any, messages: Sequence[Mapping[str, Any]], i: int, full: str,
                    after: int) -> tuple[int, int]:
    """[start, end) of assistant message i's trained text in `full`: from the end of the
    generation prompt through the last eos of the turn."""
    prompt = _render(tokenizer, messages[:i], True)
    turn = _render(tokenizer, messages[: i + 1], False)
    for what, text in (("messages[:i] with the generation prompt", prompt), ("messages[:i+1]", turn)):
        if not full.startswith(text):
            raise ValueError(
                f"chat template problem at assistant message {i}: rendering {what} is not a prefix of the whole "
                "conversation's rendering, so the turn cannot be located (does the template rewrite earlier turns, "
                "e.g. drop their reasoning?)")
    if len(prompt) < after or len(turn) <= len(prompt):
        raise ValueError(f"chat template problem at assistant message {i}: the turn renders empty or overlaps the "
                         "previous assistant turn")
    eos = tokenizer.eos_token
    cut = full.rfind(eos, len(prompt), len(turn)) if eos else -1
    if cut < 0:
        raise ValueError(f"chat template problem at assistant message {i}: the turn renders as "
                         f"{full[len(prompt):len(turn)]!r}, without the eos token {eos!r}, so the model would never "
                         "learn to stop")
    return len(prompt), cut + len(eos)


def chat_to_item(messages: Sequence[Mapping[str, Any]], tokenizer: Any, *, meta: dict | None = None) -> SAWItem:
    """SFT item from a whole conversation: every assistant turn (content + eos) is trained,
    system/user/tool turns and template scaffolding are context. Must end with an assistant turn."""
    validate_messages(messages)
    messages = [dict(m) for m in messages]
    if messages[-1]["role"] != "assistant":
        raise ValueError(f"a chat must end with an assistant message (the training target); the last, message "
                         f"{len(messages) - 1}, has role {messages[-1]['role']!r}")
    rendered = render_chat(tokenizer, messages)
    full = rendered.text
    ids: list[int] = []
    mask: list[int] = []
    pos = 0
    for i in (k for k, m in enumerate(messages) if m["role"] == "assistant"):
        start, end = _assistant_span(tokenizer, messages, i, full, pos)
        context = rendered.ids(tokenizer, pos, start)
        target = rendered.ids(tokenizer, start, end)
        if target[-1] != tokenizer.eos_token_id:
            raise ValueError(f"assistant message {i}: eos text {tokenizer.eos_token!r} does not encode to eos id "
                             f"{tokenizer.eos_token_id} (is it a special token of this tokenizer?)")
        ids += list(context) + target
        mask += [0] * len(context) + [1] * len(target)
        pos = end
    return SAWItem(input_ids=ids, attention_mask=[1] * len(ids), action_mask=mask, weight=1.0, meta=dict(meta or {}))


def _drop_nulls(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _drop_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_nulls(v) for v in value]
    return value


def _messages_of(row: Any, where: str) -> list[dict]:
    if not isinstance(row, Mapping):
        raise ValueError(f"{where}: a row is a {type(row).__name__}, not an object with 'messages'")
    if "messages" not in row:
        raise ValueError(f"{where}: no 'messages' field (keys: {sorted(row)})")
    validate_messages(row["messages"], where)
    return [dict(m) for m in row["messages"]]


def _read_jsonl(path: Path) -> list[list[dict]]:
    return [_messages_of(row, f"{path}:{lineno}") for lineno, row in iter_jsonl(path, objects=False)]


def dataset_chats(ds: Any, where: str | Path) -> list[list[dict]]:
    """Chats from a loaded `datasets.Dataset` with a "messages" column (`where` names it in errors).

    Arrow gives every message every key any message has (None where absent), and so for
    nested tool arguments; nulls are dropped so rows read back as they were written."""
    if "messages" not in ds.column_names:
        raise ValueError(f"{where}: dataset has no 'messages' column (columns: {ds.column_names})")
    examples = []
    for i, row in enumerate(ds.select_columns(["messages"])):
        msgs = row["messages"]
        if isinstance(msgs, list):
            msgs = [{**_drop_nulls(m), "content": m.get("content")} if isinstance(m, Mapping) else m for m in msgs]
        examples.append(_messages_of({"messages": msgs}, f"{where} row {i}"))
    return examples


def read_chat_examples(path: str | Path) -> list[list[dict]]:
    """Chats from a JSONL file (one {"messages": [...]} per line) or a `datasets.save_to_disk`
    directory with a "messages" column; a file is read as JSONL, a directory as a dataset."""
    path = Path(path)
    if path.is_dir():
        return dataset_chats(load_saved_dataset(path), path)
    if path.is_file():
        return _read_jsonl(path)
    raise FileNotFoundError(f"no chat data at {path}: expected a JSONL file or a datasets.save_to_disk directory")


def chat_items(path: str | Path, tokenizer: Any) -> list[SAWItem]:
    """`read_chat_examples` + `chats_to_items`."""
    return chats_to_items(read_chat_examples(path), tokenizer, where=path)


def chats_to_items(
    chats: Sequence[Sequence[Mapping[str, Any]]], tokenizer: Any, *, where: str | Path
) -> list[SAWItem]:
    """`chat_to_item` for each chat; meta["row"] is the 0-based chat index, errors name `where` and the row."""
    items = []
    for i, messages in enumerate(chats):
        try:
            items.append(chat_to_item(messages, tokenizer, meta={"row": i}))
        except ValueError as e:
            raise ValueError(f"{where} row {i}: {e}") from e
    return items

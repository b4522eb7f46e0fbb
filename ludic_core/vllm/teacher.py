"""`VLLMTeacher`: a distillation teacher served by vLLM, asked for prompt log-probs.

On-policy distillation needs the teacher's log-prob of every token the student
sampled. A vLLM server gives it without generating anything: `/v1/completions`
with the item's token ids as the prompt and `prompt_logprobs: 0` returns, for
each prompt position after the first, the log-prob of the token actually there
(vLLM always includes the chosen token beside its top-k). The ids go in as ids,
so nothing is re-tokenised; the tokenizer check (`check_tokenizer`) makes sure
the teacher reads those ids as the same text the student meant.
"""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol, Sequence

from ludic_core.inference.errors import InferenceServerError
from ludic_core.vllm.http import ControlClient

__all__ = ["VLLMTeacher", "TOKENIZER_PROBE"]

#: Text whose ids the teacher's tokenizer must reproduce: ASCII, digits, markup, whitespace
#: runs and non-Latin scripts, where vocabularies differ first.
TOKENIZER_PROBE = ("Tool call: <tool_call>{\"name\": \"calculator\", \"arguments\": {\"expression\": \"79 * 25\"}}"
                   "</tool_call>\n  X | O | .\n---------\n\tnaïve café Ünïcödé 数学 математика 🙂 0123456789")


class Scored(Protocol):
    """What is scored: a SAW item's ids and action mask (`meta` names it in errors)."""

    input_ids: list[int]
    action_mask: list[int]
    meta: dict[str, Any]


class VLLMTeacher:
    """Scores items on a vLLM server (`base_url` ends in /v1), `concurrency` requests at once."""

    def __init__(self, base_url: str, *, model: str | None = None, api_key: str | None = None,
                 concurrency: int = 8, timeout_s: float = 300.0) -> None:
        base_url = base_url.rstrip("/")
        if not base_url.endswith("/v1"):
            raise ValueError(f"teacher base_url must be the OpenAI API root ending in /v1, got {base_url!r}")
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        self.base_url, self.concurrency = base_url, concurrency
        self._http = ControlClient(base_url[: -len("/v1")], api_key=api_key, timeout_s=timeout_s)
        served = {m["id"]: m for m in (self._http.get("/v1/models") or {}).get("data", [])}
        if model is None and len(served) != 1:
            raise ValueError(f"the teacher server {self.base_url} serves {sorted(served)}: name one as the "
                             "teacher's model")
        self.model = model or next(iter(served))
        if self.model not in served:
            raise ValueError(f"the teacher server {self.base_url} does not serve {self.model!r} (it serves "
                             f"{sorted(served)})")
        self.max_model_len = served[self.model].get("max_model_len")

    def check_tokenizer(self, tokenizer: Any) -> None:
        """ValueError unless the server's tokenizer encodes `TOKENIZER_PROBE` to the student's ids
        (a probe, not a proof: it catches another vocabulary, not a remapped rare token)."""
        probe = TOKENIZER_PROBE + "".join(getattr(tokenizer, "all_special_tokens", []))  # the student's too
        body = self._http.post("/tokenize", json={"model": self.model, "prompt": probe, "add_special_tokens": False})
        theirs = list((body or {}).get("tokens", []))
        ours = list(tokenizer.encode(probe, add_special_tokens=False))
        if theirs != ours:
            at = next((i for i, (a, b) in enumerate(zip(theirs, ours)) if a != b), min(len(theirs), len(ours)))
            raise ValueError(
                f"the teacher {self.model!r} at {self.base_url} has another tokenizer than the student: a probe "
                f"text is {len(theirs)} ids there and {len(ours)} here, first differing at id {at}. Distillation "
                "scores the student's own ids, so the teacher must read them as the same text: use a teacher "
                "of the student's family (cross-tokenizer alignment is not implemented)")

    def score(self, items: Sequence[Scored]) -> list[list[float]]:
        """Each item's teacher log-probs, aligned with its ids, 0.0 off its action mask."""
        if not items:
            return []
        with ThreadPoolExecutor(min(self.concurrency, len(items))) as pool:
            return list(pool.map(self._score_one, items))

    def _score_one(self, item: Scored) -> list[float]:
        temperature = item.meta.get("sampling_temperature")
        if temperature not in (None, 0, 0.0, 1, 1.0):
            raise ValueError(f"item {item.meta} was sampled at temperature {temperature}, but a vLLM teacher's "
                             "prompt log-probs are at temperature 1: sample the student at 1 (or 0) to distil from "
                             "a server, or use an in-process teacher (model_path), which scores at the item's own")
        if self.max_model_len is not None and len(item.input_ids) >= int(self.max_model_len):
            raise ValueError(f"item {item.meta} has {len(item.input_ids)} ids; the teacher server {self.base_url} "
                             f"takes at most {int(self.max_model_len) - 1} (its max_model_len {self.max_model_len}, "
                             "one kept for the token it must generate): serve it with a longer --max-model-len")
        body = self._http.post("/v1/completions", json={
            "model": self.model, "prompt": list(item.input_ids), "max_tokens": 1, "temperature": 0.0,
            "prompt_logprobs": 0})
        try:
            entries = body["choices"][0]["prompt_logprobs"]
        except (KeyError, IndexError, TypeError) as exc:
            raise InferenceServerError(f"{self.base_url}/completions gave no prompt_logprobs for item "
                                       f"{item.meta}: {str(body)[:300]}") from exc
        if not isinstance(entries, list) or len(entries) != len(item.input_ids):
            raise InferenceServerError(f"{self.base_url} returned {len(entries) if isinstance(entries, list) else entries!r}"
                                       f" prompt log-probs for an item of {len(item.input_ids)} ids ({item.meta})")
        out = [0.0] * len(item.input_ids)
        for k, (token, acts) in enumerate(zip(item.input_ids, item.action_mask)):
            if not acts or k == 0:
                continue
            entry = (entries[k] or {}).get(str(token))
            value = entry.get("logprob") if isinstance(entry, dict) else None
            if not isinstance(value, (int, float)) or math.isnan(value) or math.isinf(value):
                raise InferenceServerError(f"{self.base_url} gave no log-prob for token {token} at position {k} "
                                           f"of item {item.meta}")
            out[k] = float(value)  # vLLM reports an impossible token as -9999: the trainer floors it
        return out

    def close(self) -> None:
        self._http.close()

"""`VLLMTeacher` reading a server's answers: what it takes, and what it refuses, naming it
(a stand-in transport: the real server's answers are checked in test_distillation_vllm.py)."""

from __future__ import annotations

import json

import httpx
import pytest

import ludic_core.vllm.teacher as vllm_teacher
from ludic_core.inference.errors import InferenceServerError
from ludic_core.vllm.http import ControlClient
from ludic_core.vllm.teacher import VLLMTeacher


class Item:
    def __init__(self, ids, mask, **meta):
        self.input_ids, self.action_mask, self.meta = ids, mask, meta


def _serving(monkeypatch, completions, models=({"id": "t", "max_model_len": 8},), status=200):
    """VLLMTeacher's HTTP answered by `completions(body) -> prompt_logprobs` (a list or an error body)."""
    seen = []

    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/models":
            return httpx.Response(status, json={"data": list(models)})
        body = json.loads(request.content)
        seen.append(body)
        answer = completions(body)
        return httpx.Response(200, json=answer if isinstance(answer, dict) else
                              {"choices": [{"text": "", "prompt_logprobs": answer}]})

    def client(root_url, **kwargs):
        c = ControlClient(root_url, **kwargs)
        c._http = httpx.Client(base_url=root_url, transport=httpx.MockTransport(handle))
        return c

    monkeypatch.setattr(vllm_teacher, "ControlClient", client)
    return seen


def _entry(token, logprob):
    return {str(token): {"logprob": logprob, "rank": 1, "decoded_token": "x"}}


def test_each_action_token_gets_its_own_entry_and_the_prompt_gets_zeros(monkeypatch):
    ids, mask = [5, 6, 7, 8], [0, 0, 1, 1]
    seen = _serving(monkeypatch, lambda body: [None, _entry(6, -0.1), {**_entry(7, -1.5), **_entry(99, -0.2)},
                                               _entry(8, -9999.0)])
    teacher = VLLMTeacher("http://h:1/v1")
    assert teacher.model == "t" and teacher.max_model_len == 8
    assert teacher.score([Item(ids, mask)]) == [[0.0, 0.0, -1.5, -9999.0]]  # -9999: floored by the trainer
    assert seen == [{"model": "t", "prompt": ids, "max_tokens": 1, "temperature": 0.0, "prompt_logprobs": 0}]


@pytest.mark.parametrize("answer, match", [
    ([None, _entry(6, -0.1)], "returned 2 prompt log-probs for an item of 3 ids"),
    ([None, _entry(6, -0.1), _entry(99, -0.3)], "no log-prob for token 7 at position 2"),
    ({"error": "nope"}, "gave no prompt_logprobs"),
])
def test_an_answer_that_does_not_fit_the_item_is_named(monkeypatch, answer, match):
    _serving(monkeypatch, lambda body: answer)
    with pytest.raises(InferenceServerError, match=match):
        VLLMTeacher("http://h:1/v1").score([Item([5, 6, 7], [0, 1, 1], rollout_id="r1")])


def test_items_it_cannot_score_are_refused_before_any_request(monkeypatch):
    seen = _serving(monkeypatch, lambda body: [])
    teacher = VLLMTeacher("http://h:1/v1")
    with pytest.raises(ValueError, match="sampled at temperature 0.7.*in-process teacher"):
        teacher.score([Item([1, 2], [0, 1], sampling_temperature=0.7)])
    with pytest.raises(ValueError, match="has 8 ids; the teacher server .* takes at most 7"):
        teacher.score([Item(list(range(8)), [0] * 7 + [1])])
    assert seen == []


def test_the_model_is_named_or_the_only_one(monkeypatch):
    _serving(monkeypatch, lambda body: [], models=({"id": "a"}, {"id": "b"}))
    with pytest.raises(ValueError, match=r"serves \['a', 'b'\]: name one"):
        VLLMTeacher("http://h:1/v1")
    with pytest.raises(ValueError, match="does not serve 'c'"):
        VLLMTeacher("http://h:1/v1", model="c")
    assert VLLMTeacher("http://h:1/v1", model="b").max_model_len is None


def test_a_bad_base_url_is_named():
    # (an unreachable server: ControlClient's retries and their error, tests/inference/test_vllm_http.py)
    with pytest.raises(ValueError, match="ending in /v1"):
        VLLMTeacher("http://127.0.0.1:1")

"""A vLLM server as the distillation teacher: prompt log-probs over the student's own ids.

The server is this module's own, started without LoRA serving: vLLM 0.32's CPU build fails its
engine (an einsum shape error in the LoRA logits path) when a server with LoRA slots computes
prompt log-probs, and the session's shared server has them. Heavy: that start costs about a minute.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from ludic_core.inference.errors import InferenceServerError
from ludic_core.models import build_byte_tokenizer
from ludic_core.training.teacher import ModelTeacher
from ludic_core.vllm.teacher import VLLMTeacher
from tests.vllm_serve import serve_tiny_model

pytestmark = [pytest.mark.vllm, pytest.mark.heavy]


@pytest.fixture(scope="module")
def teacher_server(tiny_model_dir, tmp_path_factory):
    """`ludic serve --model DIR` (no LoRA), stopped by SIGTERM at the module's end."""
    with serve_tiny_model(tiny_model_dir, tmp_path_factory.mktemp("teacher-vllm-logs")) as (info, key, _):
        yield SimpleNamespace(**info, api_key=key)


def test_the_server_scores_the_tokens_as_the_in_process_teacher_does(teacher_server, tiny_model_and_tokenizer,
                                                                    sft_items):
    model, tok = tiny_model_and_tokenizer  # the model the server serves
    teacher = VLLMTeacher(teacher_server.base_url, api_key=teacher_server.api_key, concurrency=4)
    try:
        teacher.check_tokenizer(tok)
        items = sft_items[:6]
        remote, local = teacher.score(items), ModelTeacher(model, pad_id=tok.pad_token_id).score(items)
    finally:
        teacher.close()
    worst = 0.0
    for item, r, lo in zip(items, remote, local):
        assert len(r) == len(item.input_ids)
        assert [v == 0.0 for v in r] == [not m or k == 0 for k, m in enumerate(item.action_mask)]
        worst = max(worst, max(abs(a - b) for a, b in zip(r, lo)))
    print(f"\nmax |vLLM prompt log-prob - in-process| = {worst:.2e}")
    assert worst < 1e-4


def test_a_server_with_another_tokenizer_is_refused(teacher_server):
    other = build_byte_tokenizer()
    other.add_tokens(["calculator"])  # one more entry: the probe's ids differ
    teacher = VLLMTeacher(teacher_server.base_url, api_key=teacher_server.api_key)
    try:
        with pytest.raises(ValueError, match="has another tokenizer than the student"):
            teacher.check_tokenizer(other)
    finally:
        teacher.close()


def test_a_wrong_key_is_named(teacher_server):
    with pytest.raises(InferenceServerError, match="401 Unauthorized"):
        VLLMTeacher(teacher_server.base_url, api_key="wrong")

"""Shared fixtures: one tiny offline model per test session."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    from ludic_core.models import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("models") / "tiny-1m", "tiny-1m", seed=0)


@pytest.fixture(scope="session")
def tiny_model_and_tokenizer(tiny_model_dir):
    from ludic_core.models import load_model_and_tokenizer

    return load_model_and_tokenizer(tiny_model_dir)


@pytest.fixture(scope="session")
def format_tuned_model_dir(tiny_model_dir, tmp_path_factory):
    """The tiny model after a few seconds of plain cross-entropy on teacher replies.

    An untrained byte-level model almost never emits eos, so every reply is cut
    at max_tokens. A few AdamW steps on "<move>N</move><eos>" answers to real
    tic-tac-toe observations make it answer in format (often legally), which lets
    protocol tests exercise real LLM moves. Plain torch: the Trainer is tested
    elsewhere.
    """
    import asyncio

    import torch

    from ludic_core.agents import Agent
    from ludic_core.envs import TicTacToeEnv, scripted_tic_tac_toe_policy
    from ludic_core.inference import ScriptedChatClient
    from ludic_core.interaction import SingleAgentSyncProtocol
    from ludic_core.models import load_model_and_tokenizer
    from ludic_core.parsers import xml_tag_parser

    model, tok = load_model_and_tokenizer(tiny_model_dir)
    teacher = ScriptedChatClient(scripted_tic_tac_toe_policy("minimax", seed=0), tok)

    async def collect():
        eps = [
            SingleAgentSyncProtocol(Agent(teacher, parser=xml_tag_parser("move"))).run(
                TicTacToeEnv(agent_mark="XO"[s % 2]), max_steps=9, env_seed=s
            )
            for s in range(64)
        ]
        return [r for rs in await asyncio.gather(*eps) for r in rs]

    # First turns only: short prompts keep this fixture to a few seconds.
    traces = [r.steps[0].trace for r in asyncio.run(collect())]
    torch.manual_seed(0)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for step in range(50):
        batch = [traces[(step * 16 + i) % len(traces)] for i in range(16)]
        width = max(len(t.prompt_token_ids) + len(t.completion_token_ids) for t in batch)
        ids = torch.full((16, width), tok.pad_token_id)
        labels = torch.full((16, width), -100)
        for i, t in enumerate(batch):
            seq = t.prompt_token_ids + t.completion_token_ids
            ids[i, : len(seq)] = torch.tensor(seq)
            labels[i, len(t.prompt_token_ids) : len(seq)] = torch.tensor(t.completion_token_ids)
        loss = model(input_ids=ids, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    out = tmp_path_factory.mktemp("models") / "format-tuned"
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out

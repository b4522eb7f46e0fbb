"""Shared fixtures: one tiny offline model per test session; the device the suite runs on.

`pytest` runs everything on the CPU; `pytest --device cuda` (or
LUDIC_TEST_DEVICE=cuda) runs the same tests on the GPU: the option sets
LUDIC_DEVICE, which is what every `device: auto` in the library (and in the
subprocesses tests start: stages, torchrun ranks, flows) resolves to. Tests
marked `gpu` run only when CUDA is present.
"""

from __future__ import annotations

import os

import pytest


def pytest_addoption(parser):
    parser.addoption("--device", choices=("cpu", "cuda"), default=None,
                     help="device for `auto` everywhere in the suite (default: cpu, or $LUDIC_TEST_DEVICE)")


def pytest_configure(config):
    device = config.getoption("--device") or os.environ.get("LUDIC_TEST_DEVICE") or "cpu"
    if device == "cuda":
        from ludic_core.device import cuda_available

        if not cuda_available():
            raise pytest.UsageError("--device cuda: torch sees no CUDA GPU on this machine")
    os.environ["LUDIC_DEVICE"] = device


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups (its hook would run first otherwise)
def pytest_collection_modifyitems(config, items):
    from ludic_core.device import cuda_available

    # Under pytest-xdist (`make test` runs 2 workers, --dist loadgroup) an expensive fixture is
    # set up once, not once per worker: the tests of the session's vLLM server share one worker,
    # and so do the tests of a module that use one of its module-scoped fixtures (a Prefect
    # server with deployments, a sandbox pool). The other tests go wherever a worker is free.
    for item in items:
        group = _xdist_group(item)
        if group:
            item.add_marker(pytest.mark.xdist_group(group))
    # Workers take work in collection order (the Makefile turns xdist's reordering by group size
    # off): the longest groups (the vLLM server's, marker `first`) go out first, so the suite
    # does not end with one of them running alone on one core.
    items.sort(key=lambda item: not (item.get_closest_marker("first") or _xdist_group(item) == "vllm_server"))
    if cuda_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (marker gpu)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def _xdist_group(item) -> str | None:
    if "vllm_server" in getattr(item, "fixturenames", ()):
        return "vllm_server"
    info = getattr(item, "_fixtureinfo", None)
    if info is not None and any(defs[-1].scope in ("module", "class", "package")
                                for defs in info.name2fixturedefs.values() if defs):
        return item.nodeid.split("::", 1)[0]
    return None


@pytest.fixture(scope="session")
def rank_device():
    """What the 2 torchrun ranks of a test use: a GPU each under `--device cuda`
    when there are two, else CPU ranks over gloo (one GPU cannot hold 2 NCCL ranks)."""
    import torch

    if os.environ.get("LUDIC_DEVICE") == "cuda" and torch.cuda.device_count() >= 2:
        return "cuda"
    return "cpu"


@pytest.fixture
def cpu_forward_cost(monkeypatch):
    """A forward's fixed cost at the CPU's value on any device. The tests that check that sharing
    prompts leaves the step unchanged use prompts of tens of tokens, which a GPU's cost (8192
    positions) rightly leaves unshared: they would compare the unshared step with itself."""
    from ludic_core.device import FORWARD_COST_TOKENS

    monkeypatch.setitem(FORWARD_COST_TOKENS, "cuda", FORWARD_COST_TOKENS["cpu"])


@pytest.fixture(scope="session")
def device():
    """The torch device this run of the suite tests on (see the module docstring)."""
    import torch

    return torch.device(os.environ["LUDIC_DEVICE"])


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    from ludic_core.models import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("models") / "tiny-1m", "tiny-1m", seed=0)


@pytest.fixture(scope="session")
def prefect_db(tmp_path_factory):
    """A Prefect SQLite database with every migration applied, made once per run and shared by
    the xdist workers: `tests.prefect_db.seed_home(home, prefect_db)` before a server starts."""
    from tests.prefect_db import DB_FILE, migrate

    return _built_once(tmp_path_factory, "prefect-migrated", migrate) / DB_FILE


@pytest.fixture(scope="session")
def tiny_model_and_tokenizer(tiny_model_dir):
    from ludic_core.models import load_model_and_tokenizer

    return load_model_and_tokenizer(tiny_model_dir)


@pytest.fixture(scope="session")
def sft_items(tiny_model_and_tokenizer):
    """SFT items from 24 minimax-teacher games (wins and draws kept)."""
    from ludic_core.algorithms import make_sft
    from ludic_core.recipes.tic_tac_toe import keep_by_reward, teacher_rollouts

    _, tok = tiny_model_and_tokenizer
    kept, _ = keep_by_reward(teacher_rollouts(tok, games=24, seed=3), min_reward=0.5)
    return make_sft().prepare(kept).items


@pytest.fixture(scope="session")
def teacher_dataset(tiny_model_and_tokenizer, tmp_path_factory):
    """A saved SFT dataset (chat messages + the tiny tokenizer's ids) of 16 won minimax-teacher games."""
    from ludic_core.models import tokenizer_fingerprint
    from ludic_core.recipes.tic_tac_toe import keep_by_reward, teacher_rollouts
    from ludic_core.rejection import rollouts_to_dataset, save_dataset

    _, tok = tiny_model_and_tokenizer
    kept, _ = keep_by_reward(teacher_rollouts(tok, games=16, seed=4), min_reward=1.0)
    return save_dataset(rollouts_to_dataset(kept, tokenizer=tokenizer_fingerprint(tok)),
                        tmp_path_factory.mktemp("teacher-ds") / "dataset")


@pytest.fixture(scope="session")
def format_tuned_model_dir(tiny_model_dir, tmp_path_factory, device):
    """The tiny model after a few seconds of plain cross-entropy on teacher replies.

    An untrained byte-level model almost never emits eos, so every reply is cut
    at max_tokens. A few AdamW steps on "<move>N</move><eos>" answers to real
    tic-tac-toe observations make it answer in format (often legally), which lets
    protocol tests exercise real LLM moves. Plain torch: the Trainer is tested
    elsewhere. Built once per `pytest` run: the first xdist worker to ask trains it, the
    other waits for it and loads the same directory (it took each worker ~30-60 s).
    """
    return _built_once(tmp_path_factory, "format-tuned", lambda out: _format_tune(tiny_model_dir, device, out))


def _format_tune(tiny_model_dir, device, out):
    """format_tuned_model_dir's training, saved to `out` (seeded: the same weights whichever worker trains it)."""
    import asyncio

    import torch

    from ludic_core.agents import Agent
    from ludic_core.envs import TicTacToeEnv, scripted_tic_tac_toe_policy
    from ludic_core.inference import ScriptedChatClient
    from ludic_core.interaction import SingleAgentSyncProtocol
    from ludic_core.models import load_model_and_tokenizer
    from ludic_core.parsers import xml_tag_parser

    model, tok = load_model_and_tokenizer(tiny_model_dir, device=str(device))
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
        loss = model(input_ids=ids.to(device), labels=labels.to(device)).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    model.save_pretrained(out)
    tok.save_pretrained(out)


def _built_once(tmp_path_factory, name: str, build):
    """`build(dir)` run once per `pytest` run, whatever the number of xdist workers: under xdist
    the directory lies in the run's base temp dir, which its workers share (each worker's own is
    a folder of it), and a file lock makes the others wait for the first. A build that died
    half-way (no marker file) is built again."""
    import fcntl
    import shutil

    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent
    out, done = root / name, root / f"{name}.built"
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            shutil.rmtree(out, ignore_errors=True)
            build(out)
            done.touch()
    return out


@pytest.fixture(scope="session")
def vllm_server(tiny_model_dir, tmp_path_factory):
    """One real vLLM server (the CPU build here) for the whole session, started
    the way a user does: `ludic serve --model DIR --lora-rank 8`, which prints
    a JSON line once /health answers. It also serves LoRA adapters (loaded at
    runtime by the adapter tests, which unload them again); requests for the
    base and full-weight pushes work the same with LoRA serving on. Stopped by
    PID at the end (SIGTERM to `ludic serve`, which stops the server's process
    group). A missing vLLM environment fails
    the tests that need it: run `ludic serve --setup` (`.ci/run` does)."""
    from types import SimpleNamespace

    from ludic_core.vllm.server import pid_alive
    from ludic_core.vllm.setup import env_python
    from tests.vllm_serve import serve_tiny_model

    if not env_python().exists():
        pytest.fail(f"no vLLM environment at {env_python().parent.parent}: run `ludic serve --setup`")
    logs = tmp_path_factory.mktemp("vllm-logs")
    with serve_tiny_model(tiny_model_dir, logs, ["--lora-rank", "8"]) as (info, key, cli_pid):
        yield SimpleNamespace(**info, api_key=key, model_dir=tiny_model_dir, cli_pid=cli_pid,
                              root_url=info["base_url"].removesuffix("/v1"))
    assert not pid_alive(info["pid"]), "the vLLM server outlived `ludic serve`"


@pytest.fixture(scope="session")
def teacher_logprobs():
    """f(model, response, temperature, top_p=1.0) -> log-probs of the response's
    completion tokens under a full teacher-forced forward pass, in the sampling
    distribution's convention (temperature 0 = the unscaled distribution;
    top-p renormalised over the nucleus)."""
    import torch

    def compute(model, resp, temperature: float, top_p: float = 1.0) -> list[float]:
        ids = torch.tensor([resp.prompt_token_ids + resp.completion_token_ids], device=model.device)
        with torch.no_grad():
            logits = model(ids).logits[0].float()
        logp = torch.log_softmax(logits / (temperature or 1.0), dim=-1)
        start, out = len(resp.prompt_token_ids) - 1, []
        for i, tok in enumerate(resp.completion_token_ids):
            row = logp[start + i]
            if top_p < 1.0:
                probs, order = torch.sort(row.exp(), descending=True)
                kept = order[(probs.cumsum(0) - probs) < top_p]
                nucleus = torch.full_like(row, float("-inf"))
                nucleus[kept] = torch.log_softmax(row[kept], dim=-1)
                row = nucleus
            out.append(float(row[tok]))
        return out

    return compute


@pytest.fixture
def recording_compile(monkeypatch):
    """torch.compile with an eager backend that records each graph it is handed: dynamo traces
    as it would for inductor, nothing is compiled. Yields the list of graphs."""
    import torch
    import torch._dynamo

    graphs: list = []

    def recording(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    real = torch.compile  # a mode (CUDA graphs: "reduce-overhead") is inductor's, not this backend's
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: real(fn, backend=recording,
                                                                **{k: v for k, v in kw.items()
                                                                   if k not in ("backend", "mode")}))
    torch._dynamo.reset()
    yield graphs
    torch._dynamo.reset()

"""A LoRA run's publish and checkpoint: adapter only vs merged full weights, side by side.

One tiny-10m model (built offline), one LoRA trainer (r=8 on q/k/v/o, the
default `LoRAConfig`), two in-process engines: one fed adapters
(`InProcessPublisher`, mode "auto": `load_adapter` under `policy-v{step}`), one
fed merged full weights (mode "merged": merge W + B A s, copy every tensor).
Pushes alternate between the two to share machine noise. Then the checkpoint
of that LoRA run (adapter + its optimizer state) against a full fine-tune's
(every weight + AdamW moments for all of them), on disk.

With --vllm the two engines are one real vLLM server (the CPU build, started
with LoRA serving at the run's rank) and the two publishers
`VLLMPolicyPublisher`s into it: one with an adapter_dir (write PEFT files,
POST /v1/load_lora_adapter as `policy-v{step}`, unload beyond keep_last), one
without (merge, then pause, gloo weight transfer, resume). Each push is timed
end to end, as the trainer waits for it.

    .venv/bin/python benchmarks/lora_publish.py [--preset tiny-10m] [--pushes 10] [--rank 8] [--vllm]
    .venv/bin/python benchmarks/lora_publish.py --smoke [--vllm]   # CI: tiny-1m, 2 pushes each
"""

from __future__ import annotations

from ludic_core import openmp

openmp.configure()  # first: OpenMP's spin-wait, set before torch loads (ludic_core/openmp.py)

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from ludic_core.algorithms import make_sft
from ludic_core.config import LoRAConfig, TrainerConfig
from ludic_core.inference import LocalChatClient
from ludic_core.models import build_tiny_model, load_model_and_tokenizer
from ludic_core.publish import InProcessPublisher
from ludic_core.publish.base import PolicyPublisher
from ludic_core.training.trainer import Trainer


class _NoData:
    def next_batch(self):
        raise RuntimeError("this benchmark only publishes and checkpoints")

    def state_dict(self):
        return {}

    def load_state_dict(self, state):
        pass


def _trainer(model_dir: Path, lora: LoRAConfig | None, ckpt: Path) -> Trainer:
    model, tok = load_model_and_tokenizer(model_dir)
    return Trainer(model, make_sft(), _NoData(), TrainerConfig(dtype="float32", device="cpu", lora=lora),
                   tokenizer=tok, checkpoint_dir=ckpt)


def _size(path: Path, pattern: str = "**/*") -> int:
    return sum(f.stat().st_size for f in path.glob(pattern) if f.is_file())


def _push_times(tr: Trainer, publishers: dict[str, PolicyPublisher], pushes: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {name: [] for name in publishers}
    for i in range(pushes):
        tr.step += 1  # a new version each push (the values do not change the cost): the trainer
        tr.updates += 1  # publishes version `updates`, one per optimiser update
        for name, pub in (publishers.items() if i % 2 == 0 else reversed(publishers.items())):
            tr.publisher = pub
            t0 = time.perf_counter()
            tr.publish()
            times[name].append(time.perf_counter() - t0)
    return times


def _report(title: str, times: dict[str, list[float]], labels: dict[str, str]) -> None:
    a, m = statistics.median(times["adapter"]), statistics.median(times["merged"])
    print(f"\n{title} (median of {len(times['adapter'])}, CPU fp32)")
    print(f"  {labels['adapter']:<40}{a * 1e3:9.2f} ms")
    print(f"  {labels['merged']:<40}{m * 1e3:9.2f} ms   adapter is {m / a:.1f}x faster")


def _ratio(times: dict[str, list[float]]) -> str:
    return (f"ratio (merged full weights / adapter) push time: "
            f"{statistics.median(times['merged']) / statistics.median(times['adapter']):.2f}x")


def bench_vllm(args: argparse.Namespace, root: Path, model_dir: Path) -> None:
    from ludic_core.vllm.publisher import VLLMPolicyPublisher
    from ludic_core.vllm.server import VLLMServerConfig, start_vllm_server

    lora = _trainer(model_dir, LoRAConfig(r=args.rank), root / "lora")
    server, key = start_vllm_server(model_dir, VLLMServerConfig(log_dir=str(root / "logs"), max_lora_rank=args.rank,
                                                                startup_timeout_s=600))
    try:
        publishers = {"adapter": VLLMPolicyPublisher(server.root_url, api_key=key, adapter_dir=root / "adapters"),
                      "merged": VLLMPolicyPublisher(server.root_url, api_key=key)}
        publishers["merged"].connect()  # join the transfer group once, outside the timings
        lora.step = lora.updates = 1_000  # a warm-up push each (first adapter load, first transfer), then timed
        _push_times(lora, publishers, 2)
        times = _push_times(lora, publishers, args.pushes)
        pushed = {k: p.last_push["mb"] for k, p in publishers.items()}
        assert publishers["adapter"].published_model == f"policy-v{lora.updates}"
        for p in publishers.values():
            p.close()
    finally:
        server.stop()
    print(f"{args.preset} on vLLM-CPU (rank {server.lora_rank} slots, started in {server.startup_seconds:.0f} s): "
          f"adapter {pushed['adapter']:.3f} MB per push, merged weights {pushed['merged']:.1f} MB")
    _report("push into a running vLLM server per step", times,
            {"adapter": "adapter (write + /v1/load_lora_adapter)", "merged": "merged full weights (gloo weight push)"})
    print(_ratio(times))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="tiny-10m")
    ap.add_argument("--pushes", type=int, default=10)
    ap.add_argument("--rank", type=int, default=8)
    ap.add_argument("--vllm", action="store_true", help="push into a live vLLM server instead of in-process "
                                                        "engines (needs `ludic serve --setup`)")
    ap.add_argument("--smoke", action="store_true", help="CI: tiny-1m, 2 pushes each; proves the code path")
    args = ap.parse_args()
    if args.smoke:
        args.preset, args.pushes = "tiny-1m", 2
    if args.vllm:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            bench_vllm(args, root, build_tiny_model(root / args.preset, args.preset, seed=0))
        return
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        model_dir = build_tiny_model(root / args.preset, args.preset, seed=0)
        lora = _trainer(model_dir, LoRAConfig(r=args.rank), root / "lora")
        engines = {m: LocalChatClient(model_dir, dtype="float32", device="cpu") for m in ("adapter", "merged")}
        publishers = {"adapter": InProcessPublisher(engines["adapter"]),
                      "merged": InProcessPublisher(engines["merged"], mode="merged")}
        times = _push_times(lora, publishers, args.pushes)
        assert engines["adapter"].adapters.names and not engines["merged"].adapters.names
        assert all(p.published_version == lora.updates for p in publishers.values())  # a new version each push
        t0 = time.perf_counter()
        lora_ckpt = lora.save_checkpoint()
        lora_save = time.perf_counter() - t0
        full = _trainer(model_dir, None, root / "full")
        t0 = time.perf_counter()
        full_ckpt = full.save_checkpoint()
        full_save = time.perf_counter() - t0

        params = sum(p.numel() for p in full.model.parameters())
        adapter_params = sum(p.numel() for n, p in lora.model.named_parameters() if "lora_" in n)
        print(f"{args.preset}: {params / 1e6:.2f}M parameters; LoRA r={args.rank} on q/k/v/o: "
              f"{adapter_params / 1e3:.1f}k adapter parameters ({100 * adapter_params / params:.2f}%)")
        _report("in-process push per step", times,
                {"adapter": "adapter (load_adapter)", "merged": "merged full weights (sync_weights)"})
        print("\ncheckpoint on disk")
        rows = [("LoRA run (adapter)", lora_ckpt, lora_save), ("full fine-tune", full_ckpt, full_save)]
        for name, path, secs in rows:
            print(f"  {name:<20} model/ {_size(path / 'model', '*.safetensors') / 1e6:9.3f} MB   "
                  f"whole checkpoint {_size(path) / 1e6:9.3f} MB   save {secs:.2f} s")
        ratio = _size(full_ckpt / "model", "*.safetensors") / _size(lora_ckpt / "model", "*.safetensors")
        print(f"  model files: full / adapter = {ratio:.0f}x; whole: {_size(full_ckpt) / _size(lora_ckpt):.0f}x")
        print(_ratio(times))


if __name__ == "__main__":
    main()

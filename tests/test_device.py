"""One place decides device and dtype: specs, the `auto` rule, torchrun ranks, clear errors."""

import pytest
import torch
from pydantic import ValidationError

from ludic_core.config import LocalInferenceConfig, TrainerConfig
from ludic_core.device import attention_backends, cuda_available, place_model, resolve_device, resolve_dtype
from ludic_core.training.distributed import check_ranks_fit_gpus, init_distributed


def test_auto_follows_the_suite_device(device):
    # conftest sets LUDIC_DEVICE from --device, which is what `auto` resolves to
    assert resolve_device("auto").type == device.type
    assert resolve_device("cpu") == torch.device("cpu")


def test_ludic_device_env_overrides_auto(monkeypatch):
    monkeypatch.setenv("LUDIC_DEVICE", "cpu")
    assert resolve_device("auto") == torch.device("cpu")
    monkeypatch.setenv("LUDIC_DEVICE", "tpu")
    with pytest.raises(ValueError, match=r"\$LUDIC_DEVICE='tpu'"):
        resolve_device("auto")


def test_bad_device_specs_are_named():
    for bad in ("gpu", "cuda:x", "CPU", ""):
        with pytest.raises(ValueError, match=f"device {bad!r} is not one of"):
            resolve_device(bad)
    with pytest.raises(ValidationError, match="device"):
        TrainerConfig(device="gpu")
    with pytest.raises(ValidationError, match="device"):
        LocalInferenceConfig(device="cuda:one")
    assert TrainerConfig(device="cuda:1").device == "cuda:1"  # valid spec; resolved where it runs


def test_asking_for_cuda_without_a_gpu_is_a_clear_error():
    if cuda_available():
        assert resolve_device("cuda").type == "cuda"
        with pytest.raises(ValueError, match="only .* GPU"):
            resolve_device(f"cuda:{torch.cuda.device_count()}")
    else:
        with pytest.raises(RuntimeError, match="'cuda' was asked for, but torch sees no CUDA GPU"):
            resolve_device("cuda")


def test_dtype_auto_is_fp32_on_cpu_and_names_bad_values():
    cpu = torch.device("cpu")
    assert resolve_dtype("auto", cpu) == torch.float32
    assert resolve_dtype("bfloat16", cpu) == torch.bfloat16
    with pytest.raises(ValueError, match="dtype 'half' is not one of auto, float32, bfloat16, float16"):
        resolve_dtype("half", cpu)
    with pytest.raises(ValidationError, match="dtype"):
        TrainerConfig(dtype="float16")  # fp16 autocast needs a grad scaler: not offered


def test_place_model_moves_to_the_named_device():
    model = torch.nn.Linear(2, 2)
    placed, dev = place_model(model, "cpu")
    assert placed is model and dev == torch.device("cpu")


def test_single_process_context_takes_the_device_spec(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert init_distributed("cpu").device == torch.device("cpu")
    assert init_distributed("auto").device == resolve_device("auto")


def test_torchrun_rank_device_errors_come_before_any_process_group(monkeypatch):
    # WORLD_SIZE=2 without a rendezvous: the device checks must fail first, clearly
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "0")
    with pytest.raises(ValueError, match="names one GPU, but under torchrun each rank uses its local GPU"):
        init_distributed("cuda:1")
    if not cuda_available():
        with pytest.raises(RuntimeError, match="no CUDA GPU"):
            init_distributed("cuda")


def test_more_ranks_than_gpus_names_both_numbers():
    check_ranks_fit_gpus(2, 2)
    with pytest.raises(ValueError, match=r"started 2 ranks on this machine but 1 GPU\(s\) are visible.*device: cpu"):
        check_ranks_fit_gpus(2, 1)


def test_trainer_puts_the_model_on_its_device(tiny_model_dir, device):
    from ludic_core.algorithms import make_sft
    from ludic_core.models import load_model_and_tokenizer
    from ludic_core.training.trainer import Trainer

    model, tok = load_model_and_tokenizer(tiny_model_dir)  # loaded on the CPU, as in the README
    tr = Trainer(model, make_sft(), None, TrainerConfig(), tokenizer=tok)
    assert tr.ctx.device.type == device.type
    assert {p.device.type for p in tr.model.parameters()} == {device.type}
    assert tr.compute_dtype == (torch.float32 if device.type == "cpu" else resolve_dtype("auto", device))
    cpu = Trainer(model, make_sft(), None, TrainerConfig(device="cpu"),
                  tokenizer=tok)
    assert {p.device.type for p in cpu.model.parameters()} == {"cpu"} and cpu.ctx.device.type == "cpu"

    # A context the caller built (run_stage resolves the device once) is used as built: its
    # device wins over the config's spec, and the trainer keeps that very context.
    from ludic_core.training.distributed import DistContext

    ctx = DistContext(rank=0, world_size=1, local_rank=0, device=torch.device("cpu"))
    given = Trainer(model, make_sft(), None, TrainerConfig(device="auto"), tokenizer=tok, ctx=ctx)
    assert given.ctx is ctx and {p.device.type for p in given.model.parameters()} == {"cpu"}


@pytest.mark.parametrize("spec", ["auto", "cpu", "cuda", "cuda:1", "gpu", "cuda:x", "CPU", "cuda:", " cpu"])
def test_torch_free_configs_accept_exactly_the_device_specs_of_ludic_core_device(spec):
    from pydantic import ValidationError

    from ludic_core.config import TrainerConfig
    from ludic_core.device import resolve_device

    try:
        TrainerConfig(device=spec)
        config_ok = True
    except ValidationError:
        config_ok = False
    try:
        resolve_device(spec)
        device_ok = True
    except ValueError as exc:
        assert "is not one of" in str(exc)
        device_ok = False
    except RuntimeError:  # a valid spec naming a GPU this machine lacks
        device_ok = True
    assert config_ok == device_ok


def test_cuda_forwards_run_without_cudnn_attention_and_restore_the_flags():
    # cuDNN's SDPA plans every new shape on the host (see attention_backends); the flags only
    # change inside the context, and only for CUDA devices
    before = torch.backends.cuda.cudnn_sdp_enabled()
    with attention_backends(torch.device("cpu")):
        assert torch.backends.cuda.cudnn_sdp_enabled() == before
    with attention_backends(torch.device("cuda", 0)):
        assert not torch.backends.cuda.cudnn_sdp_enabled()
        assert torch.backends.cuda.flash_sdp_enabled() and torch.backends.cuda.mem_efficient_sdp_enabled()
    assert torch.backends.cuda.cudnn_sdp_enabled() == before

"""Blocks against the real embedded Prefect API: save, load by name, to_config,
and secrets that never show outside to_config()."""

from __future__ import annotations

import pytest
from pydantic import SecretStr, ValidationError

from blocks import InferenceEndpoint, RedisQueue, WandbSettings

SECRET = "s3cret-do-not-print"

# (block, the exact to_config() it must give back after a save/load round trip)
CASES = [
    (InferenceEndpoint(kind="vllm", model_path="runs/models/tiny-1m", base_url="http://127.0.0.1:8000/v1",
                       api_key=SECRET, timeout_s=30),
     {"kind": "vllm", "model_path": "runs/models/tiny-1m", "base_url": "http://127.0.0.1:8000/v1",
      "api_key": SECRET, "timeout_s": 30.0}),
    (RedisQueue(url="redis://127.0.0.1:6390/1", password=SECRET, key="ludic:test", max_len=64),
     {"url": "redis://127.0.0.1:6390/1", "password": SECRET, "key": "ludic:test", "max_len": 64}),
    (WandbSettings(api_key=SECRET, project="ludic-test", mode="offline", entity="team"),
     {"project": "ludic-test", "mode": "offline", "entity": "team", "api_key": SECRET}),
]


def _secret_fields(block) -> list[str]:
    return [name for name, value in block if isinstance(value, SecretStr)]


@pytest.mark.parametrize("block, expected", [pytest.param(b, e, id=type(b).__name__) for b, e in CASES])
def test_save_load_round_trip(prefect_api, block, expected):
    name = f"test-{type(block).__name__.lower()}"
    block.save(name, overwrite=True)
    loaded = type(block).load(name)
    assert loaded is not block
    assert loaded.to_config() == expected
    # What the API hands to anyone reading the document (the UI, `prefect block inspect`) is masked too.
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        slug = type(block).get_block_type_slug()
        masked = client.read_block_document_by_name(name, slug, include_secrets=False)
        revealed = client.read_block_document_by_name(name, slug, include_secrets=True)
    assert SECRET not in str(masked.data)
    assert (SECRET in str(revealed.data)) == bool(_secret_fields(block))  # the check above can fail
    for field in _secret_fields(loaded):
        shown = (repr(loaded), str(loaded), str(loaded.model_dump()), str(loaded.model_dump(mode="json")),
                 loaded.model_dump_json())
        assert all(SECRET not in text for text in shown), f"{field} leaked outside to_config()"
        assert isinstance(loaded.model_dump()[field], SecretStr)


def test_the_secret_bearing_blocks_are_covered():
    secret_blocks = {type(b).__name__ for b, _ in CASES if _secret_fields(b)}
    assert secret_blocks == {"InferenceEndpoint", "RedisQueue", "WandbSettings"}


def test_defaults_and_absent_secrets():
    assert InferenceEndpoint().to_config() == {"kind": "local", "model_path": "", "base_url": None,
                                              "api_key": None, "timeout_s": 60.0}
    assert RedisQueue().to_config()["password"] is None
    assert WandbSettings().to_config() == {"project": "ludic", "mode": "offline", "entity": None, "api_key": None}


@pytest.mark.parametrize("cls, kwargs, field", [
    (WandbSettings, {"mode": "sometimes"}, "mode"),
    (InferenceEndpoint, {"kind": "tgi"}, "kind"),
    (InferenceEndpoint, {"base_url": "127.0.0.1:8000"}, "base_url"),
    (InferenceEndpoint, {"timeout_s": 0}, "timeout_s"),
    (RedisQueue, {"url": "http://127.0.0.1:6379"}, "url"),
    (RedisQueue, {"max_len": 0}, "max_len"),
    (WandbSettings, {"projetc": "x"}, "projetc"),  # a typo is rejected, not kept
])
def test_invalid_field_is_named(cls, kwargs, field):
    with pytest.raises(ValidationError) as info:
        cls(**kwargs)
    assert [err["loc"][0] for err in info.value.errors()] == [field]
    assert field in str(info.value)

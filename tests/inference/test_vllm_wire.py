"""The gloo push's wire format and the server plugin's checks, without a server."""

from __future__ import annotations

import pytest
import torch

from ludic_core.vllm.plugin import ludic_gloo_wire as wire


def _metas(*specs):
    return [wire.TensorMeta(f"p{i}", d, s) for i, (d, s) in enumerate(specs)]


def test_buckets_hold_consecutive_tensors_up_to_the_budget():
    # sizes 100, 100, 300, 10 with 64-byte alignment take 128, 128, 320, 64 bytes
    assert wire.plan_buckets([100, 100, 300, 10], bucket_bytes=256) == [[0, 2], [2, 3], [3, 4]]
    # a tensor larger than the budget gets a bucket of its own
    assert wire.plan_buckets([10, 1000, 10], bucket_bytes=256) == [[0, 1], [1, 2], [2, 3]]
    assert wire.plan_buckets([1, 1, 1], bucket_bytes=1 << 20) == [[0, 3]]
    assert wire.plan_buckets([], bucket_bytes=64) == []
    with pytest.raises(ValueError, match="bucket_bytes"):
        wire.plan_buckets([1], bucket_bytes=0)


def test_pack_unpack_round_trips_mixed_dtypes_exactly():
    g = torch.Generator().manual_seed(0)
    tensors = [torch.randn(3, 5, generator=g), torch.randn(7, generator=g).bfloat16(),
               torch.randn(2, 2, 2, generator=g).half(), torch.randn(4, 3, generator=g).t()]  # last: non-contiguous
    metas = [wire.TensorMeta(str(i), str(t.dtype).removeprefix("torch."), tuple(t.shape)) for i, t in enumerate(tensors)]
    buf = wire.pack_bucket(tensors)
    assert buf.dtype == torch.uint8 and buf.numel() == wire.bucket_nbytes(metas)
    for a, b in zip(tensors, wire.unpack_bucket(buf, metas)):
        assert a.dtype == b.dtype and torch.equal(a, b)


def test_decode_rejects_malformed_update_info_naming_the_problem():
    good = wire.encode_update(_metas(("float32", (2, 3)), ("bfloat16", (4,))), bucket_bytes=1 << 20)
    metas, buckets = wire.decode_update(good)
    assert [m.shape for m in metas] == [(2, 3), (4,)] and buckets == [[0, 2]]
    cases = {
        "differ in length": {**good, "shapes": [[2, 3]]},
        "floating dtype": {**good, "dtype_names": ["int64", "bfloat16"]},
        "twice": {**good, "names": ["p0", "p0"]},
        "non-negative": {**good, "shapes": [[2, -3], [4]]},
        "cover 1 of 2": {**good, "buckets": [[0, 1]]},
        "continue at index": {**good, "buckets": [[1, 2]]},
    }
    for needle, bad in cases.items():
        with pytest.raises(ValueError, match=needle):
            wire.decode_update(bad)


def test_checkpoint_schema_is_read_from_headers(tiny_model_dir, tiny_model_and_tokenizer):
    schema = wire.read_checkpoint_schema(tiny_model_dir)
    model, _ = tiny_model_and_tokenizer
    assert schema == {k: ("float32", tuple(v.shape)) for k, v in model.state_dict().items()}
    assert "lm_head.weight" in schema  # untied: the head is its own tensor
    with pytest.raises(FileNotFoundError, match="no safetensors"):
        wire.read_checkpoint_schema(tiny_model_dir.parent)


def test_schema_problems_name_unknown_missing_and_misshaped_parameters():
    schema = {"a": ("float32", (2, 2)), "b": ("bfloat16", (3,)), "c": ("float32", (1,))}
    ok = [wire.TensorMeta("a", "float32", (2, 2)), wire.TensorMeta("b", "float32", (3,)),
          wire.TensorMeta("c", "bfloat16", (1,))]
    assert wire.schema_problems(ok, schema) == []  # float dtypes may differ: the server casts
    bad = [wire.TensorMeta("a", "float32", (2, 3)), wire.TensorMeta("zz", "float32", (1,))]
    problems = wire.schema_problems(bad, schema)
    assert "a: shape [2, 3] != served [2, 2]" in problems
    assert "unknown parameter 'zz'" in problems
    assert any("missing parameters ['b', 'c']" in p for p in problems)
    assert wire.schema_problems(bad[:1], schema, require_all=False) == ["a: shape [2, 3] != served [2, 2]"]


def test_server_extension_imports_outside_vllm_without_registering():
    from ludic_core.vllm.plugin import ludic_vllm_ext as ext

    assert ext.WeightTransferEngineFactory is None  # no vLLM in this environment
    info = ext.GlooUpdateInfo(names=["a"], dtype_names=["float32"], shapes=[[1]], buckets=[[0, 1]])
    assert wire.decode_update(info.__dict__)[0][0].name == "a"


def test_auth_middleware_guards_every_route_but_liveness(monkeypatch):
    from starlette.applications import Starlette
    from starlette.middleware.base import BaseHTTPMiddleware
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route
    from starlette.testclient import TestClient

    from ludic_core.vllm.plugin.ludic_vllm_auth import require_api_key

    ok = lambda request: PlainTextResponse("ok")  # noqa: E731
    app = Starlette(routes=[Route(p, ok, methods=["GET", "POST"]) for p in ("/health", "/pause", "/collective_rpc")])
    app.add_middleware(BaseHTTPMiddleware, dispatch=require_api_key)
    monkeypatch.setenv("VLLM_API_KEY", "right")
    http = TestClient(app)
    assert http.get("/health").status_code == 200
    assert http.post("/pause").status_code == 401
    assert "needs 'Authorization: Bearer" in http.post("/collective_rpc").json()["error"]
    assert http.post("/pause", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert http.post("/pause", headers={"Authorization": "Bearer right"}).status_code == 200


def test_a_lone_aligned_tensor_is_sent_without_a_copy():
    t = torch.randn(16, 16)  # 1024 bytes: a multiple of the alignment
    buf = wire.pack_bucket([t])
    assert buf.data_ptr() == t.data_ptr() and buf.numel() == 1024
    odd = torch.randn(3)  # 12 bytes: padded, so copied
    assert wire.pack_bucket([odd]).numel() == wire.ALIGN

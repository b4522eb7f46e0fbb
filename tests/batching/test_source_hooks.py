"""The typed seams: a plain source or publisher (no base class) gets the Protocol's hook defaults,
its own hooks are still called, and a missing required method is named (issue 56 item 4)."""

import pytest

from ludic_core.batching.saw import SAWBatch
from ludic_core.batching.sources import BatchSource, OfflineBatchSource, as_batch_source
from ludic_core.publish.base import InProcessPublisher, PolicyPublisher, as_policy_publisher


class _Plain:
    def next_batch(self): return SAWBatch(items=[], meta={})
    def state_dict(self): return {"at": 1}
    def load_state_dict(self, state): self.loaded = dict(state)


class _Recording(_Plain):
    def __init__(self): self.failures, self.commits = [], []
    def record_failure(self, error): self.failures.append(error)


def test_a_plain_source_gets_the_default_hooks_and_keeps_its_own():
    plain = as_batch_source(_Plain())
    assert isinstance(plain, BatchSource) and plain.state_dict() == {"at": 1}
    plain.checkpoint_committed(None)  # the defaults do nothing
    plain.record_failure(RuntimeError("x"))
    inner = _Recording()
    adopted = as_batch_source(inner)
    err = RuntimeError("boom")
    adopted.record_failure(err)
    adopted.checkpoint_committed(None)  # it has none: the default
    assert inner.failures == [err]


def test_a_source_subclassing_the_protocol_is_taken_as_it_is():
    from ludic_core.batching.saw import SAWItem

    src = OfflineBatchSource([SAWItem([1, 2], [1, 1], [0, 1], 1.0, {})], batch_size=1)
    assert as_batch_source(src) is src


def test_a_missing_required_method_is_named():
    class _NoState:
        def next_batch(self): return SAWBatch(items=[], meta={})

    with pytest.raises(TypeError, match="_NoState is not a BatchSource: it has no state_dict, load_state_dict"):
        as_batch_source(_NoState())
    with pytest.raises(TypeError, match="object is not a PolicyPublisher: it has no publish"):
        as_policy_publisher(object())


def test_no_source_refuses_reads_by_name():
    with pytest.raises(ValueError, match="source=None"):
        as_batch_source(None).next_batch()


def test_a_plain_publisher_gets_the_default_hooks_and_keeps_its_own():
    class _Full:
        def __init__(self): self.got = []
        def publish(self, state_dict, *, version): self.got.append(version)

    class _Adapters(_Full):
        accepts_adapters = True
        def publish_adapter(self, tensors, config, *, version): self.got.append(("adapter", version))
        def close(self): self.got.append("closed")

    full = _Full()
    pub = as_policy_publisher(full)
    assert isinstance(pub, PolicyPublisher) and not pub.accepts_adapters
    pub.publish({}, version=3)
    pub.close()
    with pytest.raises(TypeError, match="does not accept adapters"):
        pub.publish_adapter({}, None, version=4)
    assert full.got == [3]
    inner = _Adapters()
    pub = as_policy_publisher(inner)
    assert pub.accepts_adapters
    pub.publish_adapter({}, None, version=5)
    pub.close()
    assert inner.got == [("adapter", 5), "closed"]


def test_the_bundled_publisher_is_taken_as_it_is():
    class _Client:
        def sync_weights(self, params, version): pass

    pub = InProcessPublisher(_Client())
    assert as_policy_publisher(pub) is pub and not pub.accepts_adapters

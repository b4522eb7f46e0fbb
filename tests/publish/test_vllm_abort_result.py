"""What vLLM's /collective_rpc hands back for the abort of a half-done push (strings, seen on a
live server: {'results': ['False']}), read right."""

from ludic_core.vllm.publisher import left_half_done


def test_a_string_false_from_every_worker_is_no_half_done_push():
    assert not left_half_done(["False"]) and not left_half_done(["False", "False"]) and not left_half_done([])
    assert not left_half_done([False, None])


def test_any_worker_that_cleared_a_push_counts():
    assert left_half_done(["False", "True"]) and left_half_done([True]) and left_half_done(["True"])

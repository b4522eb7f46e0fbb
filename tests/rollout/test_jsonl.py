"""Rollout JSONL: what is appended reads back, and every bad line is named."""

import pytest

from ludic_core.rollout import append_rollouts, read_rollouts
from ludic_core.types import Rollout, Step


def test_appended_rollouts_read_back_past_blank_lines(tmp_path):
    path = tmp_path / "r.jsonl"
    first = Rollout(steps=[Step(index=0, prev_obs="o", action="a", next_obs=None, reward=1.0)], meta={"k": 1})
    append_rollouts(path, [first])
    with path.open("a", encoding="utf-8") as f:
        f.write("\n")
    second = Rollout()
    append_rollouts(path, [second])
    assert read_rollouts(path) == [first, second]


@pytest.mark.parametrize("line, why", [
    ("{not json", "bad.jsonl:2: not valid JSON"),
    ("[1, 2]", "bad.jsonl:2: a row is a list, expected an object"),
    ('{"id": "b"}', r"bad.jsonl:2: not a valid rollout: ValueError\(\"Rollout dict is missing 'steps'\"\)"),
    ('{"steps": [{"index": 0}]}', r"bad.jsonl:2: not a valid rollout: KeyError\('prev_obs'\)"),
    ('{"steps": [1]}', r"bad.jsonl:2: not a valid rollout: AttributeError"),
])
def test_a_bad_line_is_named_with_its_file_and_number(tmp_path, line, why):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"id": "a", "meta": {}, "steps": []}\n' + line + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=why):
        read_rollouts(path)

"""Learning-curve PNGs: the band maths by hand, a real PNG, the artifact markdown."""

import base64
import json

import pytest

from ludic_core.logging.curves import curves_png, mean_band


def test_mean_band_on_the_shared_range_by_hand():
    # run a: y = x on [0, 4]; run b: y = 2 on [1, 3] -> shared range [1, 3]
    # at x = 1: {1, 2} mean 1.5; x = 2: {2, 2} mean 2; x = 3: {3, 2} mean 2.5
    xs, mean, lo, hi = mean_band([[(0, 0), (4, 4)], [(1, 2), (3, 2)]], points=3)
    assert xs == [1.0, 2.0, 3.0]
    assert mean == pytest.approx([1.5, 2.0, 2.5])
    assert lo == pytest.approx([1.0, 2.0, 2.0])
    assert hi == pytest.approx([2.0, 2.0, 3.0])


def test_one_run_is_drawn_as_is_and_empty_runs_are_skipped():
    assert mean_band([[(2, 5.0), (0, 1.0)], []]) == ([0, 2], [1.0, 5.0], [1.0, 5.0], [1.0, 5.0])
    assert mean_band([]) == ([], [], [], [])


def test_png_is_written(tmp_path):
    out = curves_png({"tic_tac_toe": {"grpo": [[(0, 0.1), (10, 0.5)], [(0, 0.2), (12, 0.4)]],
                                      "cispo": [[(0, 0.0), (5, 0.3)]]}}, tmp_path / "c" / "curves.png")
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 2000
    with pytest.raises(ValueError, match="at least one panel"):
        curves_png({}, tmp_path / "x.png")


def test_learning_curve_markdown_embeds_the_plot(tmp_path):
    from tasks.artifacts import learning_curve_markdown

    log = tmp_path / "metrics.jsonl"
    log.write_text("\n".join(json.dumps({"step": s, "loss": 1.0 / s, "reward_mean": 0.1 * s}) for s in range(1, 6)))
    md = learning_curve_markdown("rl", str(log), ("loss", "reward_mean", "absent"))
    png = (tmp_path / "metrics.png").read_bytes()
    assert f"data:image/png;base64,{base64.b64encode(png).decode()}" in md
    assert "5 steps" in md and "**loss** 1 → 0.2" in md
    # no log yet (a stage that crashed before its first step): text only, no plot
    assert "image/png" not in learning_curve_markdown("rl", str(tmp_path / "none.jsonl"), ("loss",))

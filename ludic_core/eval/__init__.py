"""Evaluation helpers and reducers."""

from ludic_core.eval.tic_tac_toe import tic_tac_toe_metrics

__all__ = ["tic_tac_toe_metrics"]

"""Does it learn on this CPU? Offline arithmetic word problems from a model that knows nothing.

The demo chain on the arithmetic recipe (`ludic demo --recipe arithmetic`):
the oracle teacher shows its work on 4096 generated problems, SFT on them, then
GRPO rewards correct answers. Prints held-out accuracy (greedy, 300 problems)
before SFT, after SFT and after GRPO, with each stage's wall time: the numbers
`ludic demo --recipe arithmetic` prints.

    .venv/bin/python benchmarks/learning_arithmetic.py [--out runs/arith]
    .venv/bin/python benchmarks/learning_arithmetic.py --smoke   # CI: every stage once, a few episodes

The last line is the ratio of the student's accuracy after GRPO to the teacher's.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from learning_tic_tac_toe import main  # noqa: E402

if __name__ == "__main__":
    main(recipe="arithmetic", out="runs/arith", doc=__doc__)

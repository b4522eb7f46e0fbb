"""Ludic's Prefect flows: the pipelines (one module each, `flows/cli.py` lists them).

Importing this package sets OpenMP's wait policy (`ludic_core.openmp.configure()`;
a value the user set is kept). It is the one hook that runs first in every process
that runs a flow, and so decodes beside a trainer, before anything loads torch:
- the `ludic` CLI (`flows.cli:main`, imported through this package);
- a worker's flow-run process (`python -m prefect.engine`), which loads a
  deployment's entrypoint, `flows/NAME.py`, whose first import of `flows.*` comes
  before any of torch (tests/test_openmp.py checks every entrypoint in prefect.yaml).
libgomp reads its environment once, when torch loads it, so a later call would
come too late. The library itself (`import ludic_core`) sets nothing.
"""

from ludic_core import openmp

openmp.configure()

"""ludic_core: policy-gradient RL for LLM agents (see docs/library.md)."""

from ludic_core import openmp

openmp.configure()  # before anything imports torch: libgomp reads its environment once

"""Moved to ludic_core.vllm.publisher (issue 56): this path goes in the next release."""
from ludic_core.lazy import moved_module
moved_module(__name__, "ludic_core.vllm.publisher")

"""Offline tiny models and a loader for any HF model directory."""

from ludic_core.models.fingerprint import tokenizer_fingerprint
from ludic_core.models.loading import load_model_and_tokenizer
from ludic_core.models.tiny import PRESETS, build_byte_tokenizer, build_tiny_model

__all__ = ["PRESETS", "build_byte_tokenizer", "build_tiny_model", "load_model_and_tokenizer", "tokenizer_fingerprint"]

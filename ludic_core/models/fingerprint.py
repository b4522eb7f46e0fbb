"""Do two tokenizers produce the same ids? A fingerprint says.

Rejection sampling stores a teacher's exact token ids only when the student
would have produced the same ids; otherwise SFT renders the stored chat
messages with the student's own template. Vocabulary, special tokens and chat
template together decide that.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

__all__ = ["tokenizer_fingerprint"]


def tokenizer_fingerprint(tokenizer: Any) -> str:
    """A short hash of everything that maps chat text to ids."""
    state = {
        "vocab": sorted(tokenizer.get_vocab().items()),
        # the pad token never appears in chat text (loaders set one where a model has none)
        "special": {k: str(v) for k, v in sorted(tokenizer.special_tokens_map.items()) if k != "pad_token"},
        "template": tokenizer.chat_template or "",
        "class": type(tokenizer).__name__,
    }
    return hashlib.sha256(json.dumps(state, sort_keys=True).encode()).hexdigest()[:16]

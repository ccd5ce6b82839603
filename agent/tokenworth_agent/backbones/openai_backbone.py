"""OpenAI-compatible chat completions (``vllm serve``, hosted APIs) with bounded concurrency.

Decisions:

- **Sync API over an async client.** ``generate`` blocks, but the batch's requests run
  concurrently on an ``AsyncOpenAI`` client. By default every request of the batch is in flight
  at once (the experiment engine sends a whole tick's requests in one call, and the server's own
  scheduler batches them); ``concurrency`` caps that (``asyncio.Semaphore``).
- **Replicas.** ``base_url`` may be a list (``vllm serve`` on other GPUs or machines). Each
  request goes to the healthy replica with the fewest requests in flight (ties in turn). A
  replica that fails (connection refused, timeout, 5xx, 429) is set aside for a backoff that
  doubles with its consecutive failures, and the request moves at once to another healthy
  replica, with a line saying so; when every replica is down the request waits and retries as
  below. A request is answered once: its result is taken from the one attempt that succeeded. The client and its event loop live in one private daemon thread
  per backbone, so ``generate`` works the same from plain code and from inside a running
  event loop (Jupyter, an async caller): it never calls ``asyncio.run`` on the caller's
  thread. An async caller's loop is blocked for the duration of the batch, as with any
  sync call; connections are reused across batches. ``close()`` stops the thread.
- **Token accounting.** ``output_tokens`` is the server's ``usage.completion_tokens`` (vLLM's
  server counts the end-of-sequence token, as the in-process engine does). A response without
  usage is an error (text is never re-tokenised here). ``usage.prompt_tokens`` and
  ``usage.prompt_tokens_details.cached_tokens`` are kept as ``prompt_tokens``/``cached_tokens``.
- **Seed and cap field.** ``seed`` is sent with every request. The cap goes in ``max_tokens``
  (what vLLM, llama.cpp and most servers read); ``max_tokens_field="max_completion_tokens"`` sends
  the newer name instead, and a server that rejects ``max_tokens`` naming
  ``max_completion_tokens`` is switched to it at once (one line says so).
- **Timeouts.** ``connect_timeout`` (default 10 s) bounds opening a connection; ``timeout``
  (default 600 s) bounds waiting for the reply once the request is sent. The read timeout is
  generous on purpose: it includes time the request waits in the server's queue. While a
  request is outstanding, a line says so every ``notice_every`` seconds (default 30 s), so a
  server that accepts connections but never answers is never silent.
- **Retries.** Connection errors, timeouts, 408, 409, 429 and 5xx are retried with capped
  exponential backoff (``backoff_base`` 1 s, doubling, at most ``backoff_max`` 30 s, equal
  jitter; a server's ``Retry-After`` is honoured up to the cap) for up to ``retry_for``
  seconds (default 300 s: a model server restart takes ~30 s), and at most ``max_retries``
  retries when that is set. The window is counted from the first failure since the last
  request that succeeded, on any replica: while nothing gets through (nothing listening, DNS,
  refused, every reply a 5xx), every request in flight shares **one** window, so a dead server
  costs one ``retry_for`` whatever the number of streams, and then
  :class:`~tokenworth_agent.backbones.base.ServerUnreachable` names the URL and the cause. A request that
  keeps failing while others succeed has its own window, from its own first failure, and then
  a plain :class:`BackboneError` (the engine fails that task only). Every retry prints one line (attempt, wait, cause)
  through ``on_notice`` (default: ``tqdm.write`` to stderr, above any progress bar). A request
  whose fate is unknown (read timeout, connection dropped after sending) may still be running
  on the server: it is resent only with a line that says so. The client's own retries are off, so
  every attempt is visible here. Only the successful attempt's usage counts: a failed attempt
  returns no completion and is billed nothing in the budget. Other errors (400, 401, 403,
  404, 422, …) raise :class:`BackboneError` at once, with a hint where one is known (a 404
  from a base URL without ``/v1``; a model name the server does not serve).
- **Sampling.** ``temperature=0, top_p=1`` and zero presence/frequency penalties are always
  sent. ``vllm serve`` otherwise fills unset fields (top_k, repetition_penalty) from the
  model's generation config: start it with ``--generation-config vllm`` or pass
  ``extra_body={"top_k": -1, "repetition_penalty": 1.0}`` (hosted APIs reject those).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import random
import sys
import threading
import time
from typing import Any, Callable, Mapping, Sequence

from tokenworth_agent.backbones.base import BackboneError, Conversation, Generation, ServerUnreachable, checked_caps

INSTALL_HINT = "pip install 'tokenworth-agent[openai]'"
TRANSIENT_STATUS = frozenset({408, 409, 429})  # plus every 5xx
MAX_TOKENS_FIELDS = ("max_tokens", "max_completion_tokens")


class Replica:
    """One server of the pool: its URL, client, load and health."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.client: Any = None
        self.in_flight = 0
        self.failures = 0  # consecutive
        self.down_until = 0.0
        self.served = 0
        self.max_tokens_field: str | None = None  # learnt from a server that rejected the other one

    def up(self, now: float) -> bool:
        return now >= self.down_until


def _urls(base_url: str | Sequence[str] | None) -> list[str | None]:
    if base_url is None or isinstance(base_url, str):
        return [base_url]
    urls = [str(u) for u in base_url]
    if not urls:
        raise ValueError("base_url: give at least one URL")
    if len(set(urls)) != len(urls):
        raise ValueError(f"base_url lists a URL twice: {urls}")
    return list(urls)


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
        base_url: str | Sequence[str] | None = None,
        api_key: str | None = None,
        concurrency: int | None = None,
        timeout: float = 600.0,
        connect_timeout: float = 10.0,
        retry_for: float = 300.0,
        max_retries: int | None = None,
        backoff_base: float = 1.0,
        backoff_max: float = 30.0,
        notice_every: float = 30.0,
        extra_body: Mapping[str, Any] | None = None,
        on_notice: Callable[[str], None] | None = None,
        seed: int | None = None,
        max_tokens_field: str = "max_tokens",
    ) -> None:
        if concurrency is not None and concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {concurrency}")
        if max_retries is not None and max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {max_retries}")
        for name, value in (("timeout", timeout), ("connect_timeout", connect_timeout), ("notice_every", notice_every)):
            if not value > 0:
                raise ValueError(f"{name} must be > 0 seconds, got {value}")
        if retry_for < 0 or backoff_base < 0 or backoff_max < 0:
            raise ValueError("retry_for, backoff_base and backoff_max must be >= 0")
        if max_tokens_field not in MAX_TOKENS_FIELDS:
            raise ValueError(f"max_tokens_field must be one of {MAX_TOKENS_FIELDS}, got {max_tokens_field!r}")
        urls = _urls(base_url)
        self._openai = import_openai()
        key = api_key or os.environ.get("OPENAI_API_KEY")
        if not key:
            if base_url is None:
                raise BackboneError("the 'openai' backbone needs api_key or OPENAI_API_KEY (or a base_url of a local server)")
            key = "EMPTY"  # local servers (vllm serve) accept any key
        self.model = model
        self.base_url = base_url
        self.replicas = [Replica((u or "https://api.openai.com/v1").rstrip("/")) for u in urls]
        self.url = self.replicas[0].url
        self.concurrency = concurrency
        self.seed = seed
        self.max_tokens_field = max_tokens_field
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.retry_for = retry_for
        self.max_retries = max_retries
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.notice_every = notice_every
        self.extra_body = dict(extra_body or {})
        self.on_notice = on_notice or _print_notice
        self.attempts = 0  # HTTP requests sent, retries included (for logs and tests)
        self.notices: list[str] = []  # every line printed, for tests and logs
        self._client_options = {"api_key": key, "max_retries": 0,
                                "timeout": self._openai.Timeout(timeout, connect=connect_timeout)}
        self._explicit_url = base_url is not None
        self._turn = 0
        self._jitter = random.Random()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._last_notice: tuple[str, float] = ("", 0.0)
        # monotonic time of the first failure since the last success (None: the last request got through)
        self._outage: float | None = None
        self._outage_said = 0  # the highest retry round announced in this outage

    def notice(self, text: str, *, key: str | None = None) -> None:
        """Report one line; the same ``key`` within 2 s (parallel requests failing alike) is said once."""
        now = time.monotonic()
        key = key or text
        if key == self._last_notice[0] and now - self._last_notice[1] < 2.0:
            return
        self._last_notice = (key, now)
        self.notices.append(text)
        self.on_notice(text)

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
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
            clients = [r.client for r in self.replicas if r.client is not None]
            for replica in self.replicas:
                replica.client = None
        if loop is None:
            return
        for client in clients:
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
    ) -> list[Generation]:
        caps = checked_caps(conversations, max_tokens)
        if not conversations:
            return []
        loop = self._ensure_loop()
        batch = self._generate_batch(conversations, caps, list(stop) if stop else None)
        return asyncio.run_coroutine_threadsafe(batch, loop).result()

    def submit(self, conversation: Conversation, max_tokens: int) -> "concurrent.futures.Future[Generation]":
        """One request, answered asynchronously (the engine's ``continuous`` schedule).

        The request joins the others in flight on the backbone's event loop; the server batches
        them as they come (continuous batching), and the future resolves as soon as this reply is
        back. Retries, replicas and failover are those of :meth:`generate`.
        """
        [cap] = checked_caps([conversation], [max_tokens])
        loop = self._ensure_loop()

        async def single() -> Generation:
            [generation] = await self._generate_batch([conversation], [cap], None)
            return generation

        return asyncio.run_coroutine_threadsafe(single(), loop)

    async def _generate_batch(
        self, conversations: Sequence[Conversation], caps: Sequence[int], stop: list[str] | None
    ) -> list[Generation]:
        for replica in self.replicas:  # clients are built inside the loop that uses them
            if replica.client is None:
                url = replica.url if self._explicit_url else None
                replica.client = self._openai.AsyncOpenAI(**self._client_options, base_url=url)
        gate = asyncio.Semaphore(self.concurrency or len(conversations))

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

    def _pick(self) -> Replica:
        """The healthy replica with the fewest requests in flight (ties in turn); when none is
        healthy, the one that comes back first."""
        now = time.monotonic()
        n = len(self.replicas)
        order = [self.replicas[(self._turn + i) % n] for i in range(n)]
        self._turn = (self._turn + 1) % n
        healthy = [r for r in order if r.up(now)]
        if healthy:
            return min(healthy, key=lambda r: r.in_flight)
        return min(order, key=lambda r: r.down_until)

    def _set_aside(self, replica: Replica, retry_after: float | None) -> None:
        replica.failures += 1
        pause = min(self.backoff_max, self.backoff_base * 2 ** (replica.failures - 1))
        if retry_after is not None:
            pause = max(pause, min(retry_after, self.backoff_max))
        replica.down_until = time.monotonic() + pause

    async def _with_retries(self, conversation: Conversation, cap: int, stop: list[str] | None) -> Generation:
        first_failure: float | None = None  # the retry window opens at the first failure
        retries = 0
        tried: list[str] = []
        while True:
            replica = self._pick()
            try:
                replica.in_flight += 1
                try:
                    generation = await self._watched(self._request(replica, conversation, cap, stop), replica)
                finally:
                    replica.in_flight -= 1
                replica.failures, replica.down_until = 0, 0.0
                replica.served += 1
                self._outage, self._outage_said = None, 0
                return generation
            except self._openai.APIStatusError as exc:
                if self._switch_cap_field(replica, exc):
                    continue
                if not _is_transient_status(exc.status_code):
                    raise BackboneError(self._rejection(exc, replica)) from exc
                cause, maybe_running = f"HTTP {exc.status_code} {_message(exc)}", False
                retry_after = _retry_after_seconds(exc)
            except self._openai.APIConnectionError as exc:  # includes APITimeoutError
                cause, maybe_running = _connection_cause(exc, self.timeout, self.connect_timeout)
                retry_after = None
            if len(self.replicas) > 1:
                self._set_aside(replica, retry_after)
            if replica.url not in tried:
                tried.append(replica.url)
            now = time.monotonic()
            first_failure = now if first_failure is None else first_failure
            self._outage = now if self._outage is None else self._outage
            # nothing got through since before this request first failed: the shared outage window
            outage = self._outage <= first_failure
            elapsed = now - min(first_failure, self._outage)
            left = self.retry_for - elapsed
            other = self._pick()
            failover = other is not replica and other.up(now)
            # the last wait is cut to the window's end, so the window is used whole, then one last attempt
            wait = 0.0 if failover else min(self._backoff(retries, retry_after), max(0.0, left))
            if left <= 0 or (self.max_retries is not None and retries >= self.max_retries):
                raise self._given_up(tried, cause, retries + 1, elapsed, left <= 0, outage)
            retries += 1
            resend = " It may still be running the earlier request, which is sent again." if maybe_running else ""
            then = (f"failing over to {other.url} at once" if failover
                    else f"retry {retries} in {wait:.1f}s ({left:.0f}s of --retry-for left)")
            if not outage or retries > self._outage_said:  # an outage: one line per round, not one per request
                self._outage_said = retries if outage else self._outage_said
                self.notice(f"openai: attempt {retries} to {replica.url} failed: {cause}; {then}.{resend}",
                            key=f"{retries}|{replica.url}|{cause}")
            if wait:
                await asyncio.sleep(wait)

    def _given_up(self, tried: Sequence[str], cause: str, attempts: int, elapsed: float, window: bool,
                  outage: bool) -> BackboneError:
        """The one error line when retrying stops: an outage (:class:`ServerUnreachable`) or one request's."""
        limit = f"--retry-for {self.retry_for:g}" if window else f"--max-retries {self.max_retries}"
        one = len(tried) == 1
        where = f"the model server at {tried[0]}" if one else f"the model servers at {', '.join(tried)}"
        if outage:
            return ServerUnreachable(
                f"{where} answered no request for {elapsed:.0f}s: {cause} ({attempts} attempts by the last request, "
                f"{limit}). Check that {'it is' if one else 'they are'} running and reachable, then rerun the same "
                "command to resume (finished tasks are kept)")
        return BackboneError(f"{where} failed one request while others got through: {cause} ({attempts} attempts "
                             f"over {elapsed:.0f}s, {limit})")

    def _switch_cap_field(self, replica: Replica, exc: Any) -> bool:
        """A 400 that asks for the other cap field: use it on this replica from now on."""
        field = replica.max_tokens_field or self.max_tokens_field
        wanted = next((f for f in MAX_TOKENS_FIELDS if f != field), None)
        message = _message(exc)
        if exc.status_code != 400 or field not in message or wanted is None or wanted not in message:
            return False
        replica.max_tokens_field = wanted
        self.notice(f"openai: {replica.url} rejects {field!r}; sending {wanted!r} from now on")
        return True

    async def _watched(self, request: Any, replica: Replica) -> Generation:
        """Await ``request``, saying every ``notice_every`` seconds that it is still outstanding."""
        task = asyncio.ensure_future(request)
        started = time.monotonic()
        try:
            while True:
                done, _ = await asyncio.wait({task}, timeout=self.notice_every)
                if done:
                    return task.result()
                self.notice(f"openai: still waiting for {replica.url} ({time.monotonic() - started:.0f}s of the "
                            f"{self.timeout:g}s read timeout; requests in flight are not resent)",
                            key=f"wait|{int((time.monotonic() - started) // self.notice_every)}")
        finally:
            if not task.done():
                task.cancel()

    def _backoff(self, retry: int, retry_after: float | None) -> float:
        """Capped exponential backoff with equal jitter; a Retry-After is honoured up to the cap."""
        ceiling = min(self.backoff_max, self.backoff_base * 2**retry)
        delay = ceiling / 2 + self._jitter.uniform(0, ceiling / 2)
        if retry_after is not None:
            delay = max(delay, min(retry_after, self.backoff_max))
        return delay

    def _rejection(self, exc: Any, replica: Replica) -> str:
        """One line for a non-transient HTTP error, with a hint where one is known."""
        status, message = exc.status_code, _message(exc)
        url = replica.url
        text = f"the model server at {url} rejected the request (HTTP {status}): {message}"
        if "model" in message.lower() and status in (400, 404, 422):
            served = self._served_models(url)
            text += (f". The --model flag names {self.model!r}; pass a model the server serves"
                     + (f" ({', '.join(served)})" if served else "") + " with --model.")
        elif status == 404 and not url.endswith("/v1"):
            text += f". Did you mean --base-url {url}/v1 ?"
        return text

    def _served_models(self, url: str) -> list[str]:
        """The server's model ids (``GET /models``), or [] when it will not say."""
        try:
            import httpx

            reply = httpx.get(f"{url}/models", timeout=self.connect_timeout,
                              headers={"Authorization": f"Bearer {self._client_options['api_key']}"})
            return [str(m.get("id")) for m in reply.json().get("data", [])][:10]
        except Exception:  # noqa: BLE001 - only a hint
            return []

    async def _request(self, replica: Replica, conversation: Conversation, cap: int,
                       stop: list[str] | None) -> Generation:
        self.attempts += 1
        options: dict[str, Any] = {replica.max_tokens_field or self.max_tokens_field: cap}
        if stop:
            options["stop"] = stop
        if self.seed is not None:
            options["seed"] = self.seed
        if self.extra_body:
            options["extra_body"] = self.extra_body
        response = await replica.client.chat.completions.create(
            model=self.model,
            messages=[{"role": str(m["role"]), "content": str(m["content"])} for m in conversation],
            temperature=0,
            top_p=1,
            presence_penalty=0,
            frequency_penalty=0,
            n=1,
            **options,
        )
        if not response.choices:
            raise BackboneError(f"{replica.url} returned no choices")
        if response.usage is None or response.usage.completion_tokens is None:
            raise BackboneError(
                f"{replica.url} returned no usage.completion_tokens; the budget needs the server's own "
                "count (text is never re-tokenised). Use a server that reports usage."
            )
        choice = response.choices[0]
        usage = response.usage
        details = getattr(usage, "prompt_tokens_details", None)
        cached = getattr(details, "cached_tokens", None) if details is not None else None
        prompt = getattr(usage, "prompt_tokens", None)
        return Generation(
            text=choice.message.content or "",
            output_tokens=int(usage.completion_tokens),
            finish_reason=str(choice.finish_reason or "stop"),
            prompt_tokens=int(prompt) if prompt is not None else None,
            cached_tokens=int(cached) if cached is not None else None,
        )


def _print_notice(text: str) -> None:
    """Print above any tqdm progress bar (on stderr)."""
    from tqdm import tqdm

    tqdm.write(text, file=sys.stderr)


def _message(exc: Any) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and inner.get("message"):
            return str(inner["message"])
        if isinstance(inner, str):
            return inner
    return str(getattr(exc, "message", exc))


def _connection_cause(exc: Any, read_timeout: float, connect_timeout: float) -> tuple[str, bool]:
    """(what went wrong, whether the server may still be running the request).

    The transport error is the ``__cause__`` of the client's APIConnectionError; it is matched
    by class name (``ConnectError``, ``ConnectTimeout``, ``…Timeout…``), since openai releases
    differ in which httpx module they raise from.
    """
    cause = exc.__cause__
    names = {cls.__name__ for cls in type(cause).__mro__} if cause is not None else set()
    if "ConnectTimeout" in names:
        return f"no connection within {connect_timeout:g}s (connect timeout)", False
    if "ConnectError" in names:
        return f"cannot connect ({_root(cause)})", False
    if "TimeoutException" in names or type(exc).__name__ == "APITimeoutError":
        return f"no reply within the {read_timeout:g}s read timeout", True
    if cause is not None:
        return f"connection lost ({type(cause).__name__}: {_root(cause)})", True
    return f"connection error ({exc})", True


def _root(exc: BaseException) -> str:
    """The innermost cause's text ("[Errno 111] Connection refused"), else the error's own."""
    while exc.__cause__ is not None or exc.__context__ is not None:
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
    return str(exc) or type(exc).__name__


def _is_transient_status(status: int) -> bool:
    return status in TRANSIENT_STATUS or status >= 500


def _retry_after_seconds(exc: Any) -> float | None:
    response = getattr(exc, "response", None)
    value = response.headers.get("retry-after") if response is not None else None
    try:
        return float(value) if value is not None else None
    except ValueError:  # an HTTP date: fall back to our own backoff
        return None

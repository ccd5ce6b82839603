"""What one reply may cost: a wall-clock budget and size bounds, all injectable.

One :class:`Deadline` covers a whole reply (every statement in it): parsing, transpiling,
executing, the Python filesort emulation and rendering the observation. SQLite's progress
handler and the Python loops check it; the parts that cannot be interrupted (sqlglot's
parser, single SQLite function calls) are kept short by bounding their input instead:

* a statement longer than ``statement_chars`` is refused before it is parsed (MySQL's
  ``max_allowed_packet`` error, 1153), so parsing costs at most a fraction of a second;
* parentheses nested deeper than ``nesting`` are refused before parsing (1436, MySQL's
  "thread stack overrun"), and any deeper recursion met later gets the same error;
* SQLite values are capped at ``value_bytes`` (MySQL returns NULL or fails past
  ``max_allowed_packet`` too), and the functions whose SQLite versions are quadratic or
  loop per output character (``printf``/``format``, ``instr``, ``replace``, ``trim``) are
  refused or replaced by linear ones (see ``functions``);
* at most ``rows`` rows are fetched per statement and at most ``result_chars`` characters
  are rendered into the observation (the rest is cut, and the cut is said);
* above ``sort_rows`` rows the filesort emulation gives way to SQLite's own sort.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Callable

from . import errors

Clock = Callable[[], float]


@dataclasses.dataclass(frozen=True)
class Limits:
    time_s: float = 5.0  # wall-clock budget for one reply (all its statements)
    statement_chars: int = 16_384  # 40x the longest gold statement
    nesting: int = 32  # levels of parentheses
    value_bytes: int = 1 << 20  # longest string/blob a statement may build
    rows: int = 100_000  # rows fetched per statement
    sort_rows: int = 20_000  # largest result the filesort emulation sorts
    result_chars: int = 32_768  # longest observation

    def __post_init__(self) -> None:
        if self.time_s <= 0:
            raise ValueError(f"time_limit_s must be positive, got {self.time_s}")
        for field in ("statement_chars", "nesting", "value_bytes", "rows", "sort_rows", "result_chars"):
            if getattr(self, field) < 1:
                raise ValueError(f"limits.{field} must be at least 1, got {getattr(self, field)}")


class Deadline:
    """The end of one reply's budget on ``clock`` (seconds, monotonic)."""

    def __init__(self, seconds: float, clock: Clock = time.monotonic) -> None:
        self.seconds = seconds
        self._clock = clock
        self._end = clock() + seconds

    def expired(self) -> bool:
        return self._clock() > self._end

    def check(self) -> None:
        """Raise MySQL's timeout error (3024) once the budget is spent."""
        if self.expired():
            raise errors.timeout(self.seconds)

    def checker(self, every: int) -> Callable[[], None]:
        """A cheap ``check`` for hot loops: reads the clock once per ``every`` calls."""
        count = 0

        def tick() -> None:
            nonlocal count
            count += 1
            if count % every == 0:
                self.check()

        return tick

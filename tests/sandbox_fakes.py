"""A manual clock for sandbox tests: deadlines pass when the test says so, not when
the (shared, loaded) machine happens to be slow or fast."""

from __future__ import annotations


class ManualClock:
    """Stands still until armed with :meth:`jump_after`; then, after that many more
    reads, jumps forward once."""

    def __init__(self) -> None:
        self.now = 0.0
        self.reads = 0
        self._jump: tuple[int, float] | None = None

    def jump_after(self, reads: int, seconds: float) -> None:
        self._jump = (self.reads + reads, seconds)

    def __call__(self) -> float:
        self.reads += 1
        if self._jump is not None and self.reads > self._jump[0]:
            self.now += self._jump[1]
            self._jump = None
        return self.now

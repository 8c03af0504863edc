"""How many decode steps to submit before each token readback.

A readback waits for the GPU to finish everything submitted, so few steps a read leave the GPU idle while the host
reads, then encodes the next batch (SmolLM2 on the H200: 596 tok/s at 4 steps a read, 845 at 16); many steps a read
delay streaming and Stop by that many steps. ``ReadPacer`` aims at a fixed time between readbacks instead of a fixed
count: it measures the time per step of each read (submit to tokens back) and sizes the next read to take about
``target_ms``. A fast GPU then runs long reads (tens of steps), a slow one (a CPU adapter) one step at a time.
"""
from __future__ import annotations


class ReadPacer:
    def __init__(self, target_ms: float = 30.0, first: int = 4, most: int = 128):
        self.target_ms = target_ms
        self.first = first          # steps of the first read, before any step was timed
        self.most = most
        self.step_ms = None         # smoothed milliseconds a step (kept across generations: same model, same GPU)
        self.last = first

    def next(self, fixed: int | None = None) -> int:
        """Steps to submit before the next readback (``fixed``: a caller's own setting, used as it is)."""
        if fixed is not None:
            return max(1, int(fixed))
        if self.step_ms is None:
            n = self.first
        else:
            n = int(self.target_ms / max(self.step_ms, 1e-3))
            n = min(n, 4 * self.last)          # grow at most 4x a read: one fast outlier does not jump far
        self.last = max(1, min(n, self.most))
        return self.last

    def observe(self, steps: int, seconds: float):
        """A read of ``steps`` steps took ``seconds`` from the first submit until its tokens were back."""
        ms = seconds * 1000 / max(steps, 1)
        self.step_ms = ms if self.step_ms is None else 0.5 * (self.step_ms + ms)

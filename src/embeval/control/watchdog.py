"""Staleness watchdog: how old is each input? Times in seconds on a monotonic clock you pass in."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Watchdog:
    """Track the last time each named input arrived and report the stale ones.

    ``max_age_s`` maps input name -> the oldest acceptable age (s); an input never seen is stale.
    """

    max_age_s: dict[str, float]
    last: dict[str, float] = field(default_factory=dict)

    def feed(self, name: str, now: float) -> None:
        self.last[name] = float(now)

    def age(self, name: str, now: float) -> float:
        """Seconds since ``name`` last arrived (inf if never)."""
        return float(now) - self.last[name] if name in self.last else float("inf")

    def stale(self, now: float) -> list[str]:
        """Names whose age exceeds their limit, in declaration order."""
        return [n for n, lim in self.max_age_s.items() if self.age(n, now) > lim]

    def reason(self, now: float) -> str:
        """A readable reason such as ``"stale image (0.84 s > 0.50 s)"``; empty when all are fresh."""
        parts = []
        for n in self.stale(now):
            a = self.age(n, now)
            parts.append(f"stale {n} ({'never received' if a == float('inf') else f'{a:.2f} s'} > {self.max_age_s[n]:.2f} s)")
        return "; ".join(parts)

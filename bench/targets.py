"""A benchmark's target beside the figure a run measured (docs/benchmarks.md lists them)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Target:
    """One of docs/benchmarks.md's targets, with this run's figure."""

    name: str
    figure: float
    goal: float
    at_most: bool = False  # the figure must stay under the goal (a time), not reach it (a rate)
    form: str = ""  # how figure and goal are printed; by default a time in whole ms, a ratio to two places

    @property
    def met(self) -> bool:
        return self.figure <= self.goal if self.at_most else self.figure >= self.goal

    def shown(self, value: float) -> str:
        return f"{value:{self.form or (',.0f' if self.at_most else '.2f')}}"

    @property
    def bound(self) -> str:
        return f"{'<=' if self.at_most else '>='} {self.shown(self.goal)}"

    def line(self) -> str:
        return f"{self.name}: {self.shown(self.figure)} (target {self.bound}) {'met' if self.met else 'MISSED'}"

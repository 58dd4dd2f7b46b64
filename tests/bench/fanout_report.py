"""What ``bench_fanout.py`` measures and how it prints it: the memory sampler, the figures of
one run, and the memory and growth lines of its report."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from tests.bench.benchstack import CPU_PARTS, BenchStack, rss_mb

MILESTONE = 10_000  # step workflows per line of the growth curve


Samples = list[tuple[float, dict[str, float]]]


class RssSampler:
    """Every half second, (seconds since ``t0``, RSS of each part and of its largest process):
    flat memory means the peak is reached early (the turns' reads of the run's units) and not
    climbed afterwards."""

    def __init__(self, stack: BenchStack) -> None:
        self.stack = stack
        self.samples: Samples = []
        self.t0 = 0.0
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self.sample, daemon=True)

    def start(self, t0: float) -> None:
        self.t0 = t0
        self.thread.start()

    def sample(self) -> None:
        while not self.stopped.wait(0.5):
            largest = rss_mb(self.stack, largest=True)
            self.samples.append(
                (
                    time.perf_counter() - self.t0,
                    {**rss_mb(self.stack), **{f"{k} process": v for k, v in largest.items()}},
                )
            )


@dataclass
class Fanout:
    """What one bench run measured."""

    floor_accept: float
    floor_done: float
    accepted: float
    mem_before: dict[str, float]
    samples: Samples
    all_created: float = 0.0
    raw: float = 0.0
    raw_sampled: float = 0.0
    raw_removed: float = 0.0  # the floor's Workflows deleted before the second fan-out
    raw_after: float = 0.0
    # (created, seconds, RSS by part) at every MILESTONE step workflows of the first fan-out.
    milestones: list[tuple[int, float, dict[str, float]]] = field(default_factory=list)
    requests: int = 0
    posts: int = 0
    behind: dict[str, float] = field(default_factory=dict)
    mem_after: dict[str, float] = field(default_factory=dict)
    first_window: float = 0.0
    # (start, created after) since the first submission, for each fan-out after the first,
    # and the CPU each part ran meanwhile.
    again: list[tuple[float, float]] = field(default_factory=list)
    again_cpu: list[dict[str, tuple[float, float]]] = field(default_factory=list)
    pages: dict[str, float] = field(default_factory=dict)
    sites_used: int = 0
    # (CPU seconds run, seconds waited for a core) by part: the first fan-out's creation, the
    # floor's creates (``benchstack.cpu_s``).
    cpu: dict[str, tuple[float, float]] = field(default_factory=dict)
    cpu_floor: dict[str, tuple[float, float]] = field(default_factory=dict)
    floor_window: float = 0.0  # the floor's creates, unscaled
    removed_settled: float = 0.0
    cpu_floor_after: dict[str, tuple[float, float]] = field(default_factory=dict)
    floor_after_window: float = 0.0
    settled: float = 0.0  # waited for the sandbox to be done with the fan-out, before the floor


def print_cpu(f: Fanout) -> None:
    """Where the two cores went while the fan-out was created and while the floor's were: the
    sandbox serves every create, so the time it ran, and the time it waited for a core while
    the portal's parts ran, tell what separates the two figures."""
    for label, window, cpu in (
        ("CPU while created (s)", f.all_created, f.cpu),
        ("floor: CPU meanwhile (s)", f.floor_window, f.cpu_floor),
    ):
        print_cpu_line(label, window, cpu)


def print_cpu_line(label: str, window: float, cpu: dict[str, tuple[float, float]]) -> None:
    if not cpu:
        return
    ran, waited = cpu["sandbox"]
    others = ", ".join(
        f"{part} {cpu[part][0]:.1f}" for part in CPU_PARTS[1:] if cpu[part][0] >= 0.05
    )
    print(
        f"    {label:<26}: sandbox {ran:.1f} ({ran / window:.0%} of the window; waited "
        f"{waited:.1f} s for a core), {others}"
    )


def print_growth(f: Fanout) -> None:
    """Time and memory per MILESTONE step workflows: the growth curve of a big fan-out."""
    if len(f.milestones) < 2:
        return
    print(f"  growth, per {MILESTONE:,} step workflows created:")
    before = 0.0
    for n, at, rss in f.milestones:
        print(
            f"    {n:>7,}: {at - before:7.1f} s   RSS web {rss.get('web', 0):6.0f} MB, "
            f"worker {rss.get('worker', 0):6.0f} MB, sandbox {rss.get('sandbox', 0):6.0f} MB"
        )
        before = at


def print_memory(f: Fanout) -> None:
    samples, window = f.samples, f.first_window
    # The sandbox's too: its watch caches hold each resource's last 75 s of events.
    for part in ("web", "worker", "sandbox"):
        print(
            f"  RSS {part:<6} MB before/peak/after: {f.mem_before[part]:6.0f} "
            f"{max(f.mem_before[part], first_peak(samples, window, part)):6.0f} "
            f"{f.mem_after[part]:6.0f}   "
            f"peak by quarter of the creation: {quarters(samples, 0.0, f.all_created, part)}"
        )
    for part in ("web", "worker"):
        print(
            f"    largest {part:<6} process, MB:            "
            f"{first_peak(samples, window, f'{part} process'):6.0f}          "
            f"peak by quarter of the creation: "
            f"{quarters(samples, 0.0, f.all_created, f'{part} process')}"
        )
    for i, (start, took) in enumerate(f.again, 2):
        print(
            f"  fan-out {i}, after the first   : every step workflow created in {took:.1f} s"
            f"   (the first's floor deleted before it, in {f.raw_removed:.1f} s, "
            f"settled {f.removed_settled:.0f} s after)"
        )
        print(
            f"    {took / f.all_created:.2f}x the first (target ≤ 1.15x); floor: raw creates on "
            f"the sandbox holding every fan-out {f.raw_after:.1f} s ({took / f.raw_after:.2f}x)"
        )
        if f.raw_after and f.raw:
            # The sandbox's own cost moves with what it holds: each fan-out against the floor
            # taken beside it tells the portal's growth from the sandbox's.
            print(
                f"    against its floor, {(took / f.raw_after) / (f.all_created / f.raw):.2f}x "
                f"the first against its floor (the portal's share; target ≤ 1.15x)"
            )
        if i - 2 < len(f.again_cpu):
            print_cpu_line("CPU while created (s)", took, f.again_cpu[i - 2])
        if i == len(f.again) + 1:  # the floor after is taken once, after the last
            print_cpu_line("floor: CPU meanwhile (s)", f.floor_after_window, f.cpu_floor_after)
        for part in ("web", "worker", "sandbox", "web process", "worker process"):
            print(
                f"    RSS {part:<14} MB peak by quarter: {quarters(samples, start, took, part)}"
                f"   (the first's peak {first_peak(samples, window, part):.0f})"
            )


def first_peak(samples: list[tuple[float, dict[str, float]]], until: float, part: str) -> float:
    return max((rss.get(part, 0.0) for at, rss in samples if at < until), default=0.0)


def quarters(
    samples: list[tuple[float, dict[str, float]]], start: float, span: float, part: str
) -> str:
    """The highest RSS of ``part`` in each quarter of the ``span`` seconds from ``start``
    (seconds after the first submission): memory that grew with the tiles created would
    climb from quarter to quarter."""
    peaks = [0.0] * 4
    for at, rss in samples:
        if start <= at < start + span:
            q = min(3, int(4 * (at - start) / span))
            peaks[q] = max(peaks[q], rss.get(part, 0.0))
    return " ".join(f"{p:.0f}" if p else "-" for p in peaks)

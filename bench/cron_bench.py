"""Time next-occurrence iteration against croniter and cronsim, in one run, and print ratios.

Run from the repository root with a separate environment that has the peers installed:

    python3 -m venv /tmp/benchvenv && /tmp/benchvenv/bin/pip install croniter cronsim
    /tmp/benchvenv/bin/python bench/cron_bench.py   # --count 1000 --repeat 5

The peers are never a dependency of django-posixcron; this script only imports the engine
(django_posixcron.cron is pure, so Django need not be installed here).
"""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from zoneinfo import ZoneInfo

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from django_posixcron.cron import CronExpression

EXPRESSIONS = (
    "* * * * *",
    "0 * * * *",
    "15 3 * * 1-5",
    "0 0 1,15 * 1",
    "0 12 14 2 *",
    "0,30 * * * *",
    "0 0 29 2 *",
    "59 23 31 12 *",
    "0 9-17 * * 1-5",
    "5,10,15,20,25,30,35,40,45,50,55 * * * *",
    "0 0 31 * *",
    "30 2 * * 0",
)
START = dt.datetime(2026, 1, 1, 0, 0, 30)

Runner = Callable[[str, dt.datetime, int], dt.datetime]


def ours(text: str, start: dt.datetime, count: int) -> dt.datetime:
    expression = CronExpression(text)
    current = start
    for _ in range(count):
        current = expression.next_after(current)
    return current


def with_cronsim(text: str, start: dt.datetime, count: int) -> dt.datetime:
    from cronsim import CronSim

    iterator = CronSim(text, start)
    current = start
    for _ in range(count):
        current = next(iterator)
    return current


def with_croniter(text: str, start: dt.datetime, count: int) -> dt.datetime:
    from croniter import croniter

    iterator = croniter(text, start)
    current = start
    for _ in range(count):
        current = iterator.get_next(dt.datetime)
    return current


def median_of(runner: Runner, text: str, start: dt.datetime, count: int, repeat: int) -> float:
    # The median, not the best: on a shared machine it moves less between runs.
    times = []
    for _ in range(repeat):
        began = time.perf_counter()
        runner(text, start, count)
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=1000, help="next() calls per expression")
    parser.add_argument("--repeat", type=int, default=5, help="median of this many runs")
    args = parser.parse_args()
    runners: dict[str, Runner] = {"posixcron": ours}
    peers: tuple[tuple[str, Runner], ...] = (
        ("cronsim", with_cronsim),
        ("croniter", with_croniter),
    )
    for name, peer in peers:
        try:
            peer("* * * * *", START, 1)
        except ImportError:
            print(f"({name} is not installed here; skipped)")
        else:
            runners[name] = peer

    from importlib.metadata import version

    versions = ", ".join(f"{name} {version(name)}" for name in runners if name != "posixcron")
    print(f"Python {sys.version.split()[0]}; {versions}; {args.count} next() per expression")
    for zone in (None, "Europe/Berlin"):
        start = START if zone is None else START.replace(tzinfo=ZoneInfo(zone))
        label = "naive" if zone is None else zone
        totals = dict.fromkeys(runners, 0.0)
        ratios: dict[str, list[float]] = {name: [] for name in runners}
        print(f"\n{label}: ms for {args.count} next() calls")
        print(f"{'expression':42}" + "".join(f"{name:>11}" for name in runners))
        for text in EXPRESSIONS:
            # The same answer from every library, or the timing means nothing.
            answers = {name: runner(text, start, 50) for name, runner in runners.items()}
            if len({answer.isoformat() for answer in answers.values()}) != 1:
                print(f"  note: answers differ for {text!r}: {answers}")
            row = f"{text:42}"
            elapsed = {}
            for name, runner in runners.items():
                elapsed[name] = median_of(runner, text, start, args.count, args.repeat)
                totals[name] += elapsed[name]
                ratios[name].append(elapsed[name] / elapsed["posixcron"])
                row += f"{elapsed[name] * 1000:11.2f}"
            print(row)
        print(f"{'total':42}" + "".join(f"{totals[name] * 1000:11.2f}" for name in runners))
        for name in runners:
            if name != "posixcron":
                ratio = totals[name] / totals["posixcron"]
                typical = statistics.median(ratios[name])
                print(
                    f"  posixcron is {ratio:.1f}x faster than {name} in total, "
                    f"{typical:.1f}x per expression (median) ({label})"
                )


if __name__ == "__main__":
    main()

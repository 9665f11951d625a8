"""Progress of the long commands (counting, report, plot, demo, recost, many traces), on a terminal only.

tqdm with `disable=None` draws on stderr when stderr is a terminal and stays silent on a pipe
or a file (and under pytest, and in CI logs), so stdout stays the table and captured output
holds no carriage-return frames. Library functions take `progress=False` by default; the CLI
asks for it.

    with steps(4, "report", enabled=progress) as bar:
        bar.step("energy"); ...                   # names the next piece, then does it
    for item in each(items, "presets", "preset", enabled=progress): ...
"""

from __future__ import annotations

import contextlib
import sys


class _Steps:
    """A bar of `total` named steps: `step(name)` marks the previous step done and names the next."""

    def __init__(self, bar) -> None:
        self.bar, self.started = bar, False

    def step(self, name: str) -> None:
        if self.bar is None:
            return
        if self.started:
            self.bar.update(1)
        self.started = True
        self.bar.set_postfix_str(name, refresh=True)


@contextlib.contextmanager
def steps(total: int, desc: str, *, enabled: bool = True):
    """A bar over `total` named steps (see _Steps), shown only on a terminal."""
    if not enabled:
        yield _Steps(None)
        return
    from tqdm import tqdm

    with tqdm(total=total, desc=desc, unit="step", disable=None, file=sys.stderr, leave=False) as bar:
        progress = _Steps(None if bar.disable else bar)
        yield progress
        if progress.started and not bar.disable:
            bar.update(1)


def each(items, desc: str, unit: str, *, enabled: bool = True):
    """`items`, with a bar on a terminal when enabled."""
    if not enabled:
        return items
    from tqdm import tqdm

    return tqdm(items, desc=desc, unit=unit, disable=None, file=sys.stderr, leave=False)

"""How the console reader numbers a loop's steps: a progress bar's count that continues across epochs, and the loop's
own number for a bar's iteration where a line of the same loop named it."""

from __future__ import annotations

import re

from grpo_doctor.diagnostics.importers.console_cells import step_word

EPOCH = re.compile(r"(?<![\w/.])epoch\s*[#:=]?\s*(\d+)", re.IGNORECASE)


def epoch_offset(line: str, found: tuple, here: int, offset: int, last_counter: int | None,
                 last_epoch: int | None) -> tuple[int, int, int | None]:
    """(offset, counter, epoch) after a row stepped by an (i/N) counter: a counter that starts again as the line's
    epoch goes up continues from where the last epoch's left off."""
    epoch = EPOCH.search(line)
    epoch_n = int(epoch[1]) if epoch else None
    if last_counter is not None and here < last_counter and epoch_n is not None and \
            last_epoch is not None and epoch_n > last_epoch:
        offset += found[2] or last_counter  # a new epoch: the counter starts again
    return offset, here, epoch_n


def named_step(line: str) -> tuple[int, int] | None:
    """(step, total) of a step word with a total on a line of no metrics (``Iteration 0/1000``), else None."""
    m = step_word(line) if any(map(str.isdigit, line)) else None
    return (int(m[2]), int(m[3])) if m and m[3] else None


def loop_step(found: tuple[str, int, int | None], named: tuple[int, int] | None) -> int:
    """The step of a row stepped by a progress bar's count: the loop's own number for it where a line of the same
    loop (the same total) named it just before (``Iteration 0/1000`` over ``1/1000 [01:03<…] KEY METRICS: …``: the
    bar counts the iterations done, the loop numbers them from 0), else the count."""
    if named is not None and named[1] == found[2] and found[1] - named[0] in (0, 1):
        return named[0]
    return found[1]


class LoopSteps:
    """The step numbers of a loop's stepped rows as the file goes: the line's own number, or a progress bar's count
    continued across epochs, and the loop's own number for a bar's iteration where a line named it just before."""

    def __init__(self):
        self.offset, self.last_counter, self.last_epoch = 0, None, None
        self.named: tuple[int, int] | None = None  # (step, total) of a line like "Iteration 0/1000" since the last row

    def see(self, line: str) -> None:
        """A line of no metrics, which may name the loop's step (``Iteration 0/1000``)."""
        self.named = named_step(line) or self.named

    def step(self, line: str, found: tuple[str, int, int | None]) -> int:
        """The step of a row whose line carries ``found`` (``_step_of``'s kind, number and total)."""
        here, self.named = found[1] if found[0] != "counter" else loop_step(found, self.named), None
        if found[0] == "counter":
            self.offset, self.last_counter, self.last_epoch = epoch_offset(line, found, here, self.offset,
                                                                          self.last_counter, self.last_epoch)
        return self.offset + here

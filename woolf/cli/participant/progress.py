"""`woolf train`'s progress: a bar on a terminal, a line now and then elsewhere (a log, CI, `| tee`).

Usage:
    with TrainProgress(app.err, total=60, quiet=as_json) as progress:
        train(ledger, TrainOptions(progress=progress))   # progress(step, total, loss) per step
    progress.step                                         # the last step reported

The bar appears with the first step, not before: a command that stops on an early error (a wrong flag's
consequence, a refused ledger) shows no empty bar above its error. Where stderr is not a terminal rich draws
no bar at all, so a line is printed for the first step, then every ``EVERY`` seconds, and for the last.
"""

from __future__ import annotations

import time

from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

from woolf import interrupts


def step_rate(steps: int, seconds: float) -> str:
    """The training speed as people read it: "12.3 steps/s", or "79.0 s/step" for slow steps."""
    if steps <= 0 or seconds <= 0:
        return ""
    rate = steps / seconds
    return f"{rate:.1f} steps/s" if rate >= 1 else f"{seconds / steps:.1f} s/step"


class TrainProgress:
    EVERY = 30.0  # seconds between progress lines where there is no terminal

    def __init__(self, console, total: int, quiet: bool = False):
        self.console, self.total, self.quiet = console, total, quiet
        self.bar: Progress | None = None
        self.task = None
        self.step = 0
        self.t0: float | None = None
        self.first = 0
        self.last_line = 0.0

    def __enter__(self) -> TrainProgress:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        if self.bar is not None:
            self.bar.stop()

    def __call__(self, step: int, total: int, loss: float) -> None:
        self.step = step
        interrupts.check()  # Ctrl-C is deferred while training (see woolf/interrupts.py)
        now = time.perf_counter()
        if self.t0 is None:
            self.t0, self.first = now, step
        info = f"loss {loss:.3f}  {step_rate(step - self.first, now - self.t0)}".rstrip()
        if self.quiet:
            return
        if self.console.is_terminal:
            self._bar().update(self.task, completed=step, total=total, info=info)
        elif step == self.first or step == total or now - self.last_line >= self.EVERY:
            self.last_line = now
            self.console.print(f"training step {step}/{total}  {info}", soft_wrap=True)

    def _bar(self) -> Progress:
        if self.bar is None:
            self.bar = Progress(TextColumn("training"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                                TextColumn("{task.fields[info]}"), TimeRemainingColumn(), console=self.console)
            self.task = self.bar.add_task("train", total=self.total, info="")
            self.bar.start()
        return self.bar

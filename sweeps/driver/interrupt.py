"""How a sweep is stopped: the signals that stop it as Ctrl+C does (SIGINT, SIGTERM, SIGHUP), what each stop is
called in the runs' reasons, and `Interrupt`, which turns a stop into what the running stage understands (Tune's
SIGUSR1 inside a Tune stage, KeyboardInterrupt elsewhere). Installed by the driver (sweeps/driver/sweep.py) for a
sweep's whole life."""
from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

# What stops a sweep as Ctrl+C does, and how its messages name it: a person (SIGINT), `kill`, SLURM or systemd
# (SIGTERM), a closed terminal or ssh session (SIGHUP).
STOP_SIGNALS = {signal.SIGINT: "Ctrl+C", signal.SIGTERM: "SIGTERM", signal.SIGHUP: "SIGHUP"}


def ended_by_slurm(job: str) -> str:
    """The cause of a stop by SLURM's SIGTERM to job `job` (scancel, a requeue, the hard time limit), in the words of
    the SLURM template's settle (clusters/slurm/ray_sweep.sbatch)."""
    return f"SLURM ended job {job} (scancel, a requeue or its time limit)"


class Interrupt:
    """A stop asked of the driver (STOP_SIGNALS, or `request` by the driver itself), remembered and turned into what
    the running stage understands.

    Inside a Tune stage it becomes SIGUSR1, Tune's own stop signal (Tune then saves its state and fit() returns
    normally, so `cause` is how the driver knows); elsewhere (the teacher stage) it raises KeyboardInterrupt.
    A second one inside a Tune stage raises KeyboardInterrupt too, as Tune's own handler would.
    A signal's cause is the text of `cause_file` when a stopper wrote one (SLURM's settle: "SLURM ended job 7 ..."),
    so the runs' reasons name what really stopped them; else, for SIGTERM inside a SLURM job, SLURM's ending of it;
    else the signal's name in STOP_SIGNALS.
    """

    def __init__(self, cause_file: Path | None = None):
        self.cause: str | None = None  # what stopped the sweep, as its messages say it ("Ctrl+C", "SIGTERM", ...)
        self.in_tune = False
        self.cause_file = cause_file
        self.stopping = False  # the driver records a stop: another signal is said and otherwise ignored
        self.holding = False   # inside `held`: a signal's stop waits for the block's end

    def signal_cause(self, signum: int) -> str:
        with contextlib.suppress(OSError, UnicodeDecodeError):
            if self.cause_file is not None and (text := self.cause_file.read_text().strip()):
                return text.splitlines()[0]
        if signum == signal.SIGTERM and (job := os.environ.get("SLURM_JOB_ID")):
            return ended_by_slurm(job)  # SLURM signals every process of the job: the driver, often before settle
        return STOP_SIGNALS[signum]

    @property
    def requested(self) -> bool:
        return self.cause is not None

    def request(self, cause: str) -> bool:
        """Stop as Ctrl+C does, for `cause`; safe from any thread. False when Tune cannot be told (outside a Tune
        stage, or asked before): a signal handler then raises KeyboardInterrupt."""
        again = self.requested
        self.cause = self.cause or cause
        if self.in_tune and not again:
            os.kill(os.getpid(), signal.SIGUSR1)
            return True
        return False

    def _handler(self, signum, frame):
        if signum == signal.SIGHUP:
            _quiet_console()
        if self.stopping:
            return
        if not self.request(self.signal_cause(signum)) and not self.holding:
            raise KeyboardInterrupt

    def check(self) -> None:
        """KeyboardInterrupt when a stop was asked: at a stage's end, in case the one its signal raised was lost (a
        KeyboardInterrupt raised inside a library's `finally` or a __del__ is printed and dropped by Python)."""
        if self.requested:
            raise KeyboardInterrupt

    @contextlib.contextmanager
    def held(self):
        """A block a signal must not cut in the middle (the local Ray's start: a KeyboardInterrupt inside ray.init
        landed in its logging's lock release and was dropped, and the sweep ran on): the stop comes at its end."""
        self.holding = True
        try:
            yield
        finally:
            self.holding = False
        self.check()

    @contextlib.contextmanager
    def installed(self):
        old = {sig: signal.signal(sig, self._handler) for sig in STOP_SIGNALS}
        had = os.environ.get("TUNE_DISABLE_SIGINT_HANDLER")
        os.environ["TUNE_DISABLE_SIGINT_HANDLER"] = "1"  # ours forwards to Tune instead
        try:
            yield self
        finally:
            for sig, handler in old.items():
                signal.signal(sig, handler)
            if had is None:
                os.environ.pop("TUNE_DISABLE_SIGINT_HANDLER", None)
            else:
                os.environ["TUNE_DISABLE_SIGINT_HANDLER"] = had

    @contextlib.contextmanager
    def tune_stage(self):
        self.in_tune = True
        try:
            yield
        finally:
            self.in_tune = False


def _quiet_console() -> None:
    """After a hang-up the terminal is gone, and a write to it fails (EIO): what the driver still prints goes
    nowhere instead (the resume command is in `python -m sweeps status NAME`)."""
    null = os.open(os.devnull, os.O_WRONLY)
    for fd in (1, 2):
        if os.isatty(fd):
            os.dup2(null, fd)
    os.close(null)

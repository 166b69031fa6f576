"""The sweep's log, <sweep dir>/sweep.log: what Ray and MLflow say that the console need not show, kept for when
something goes wrong. The console gets one line per event from the sweep's own callbacks instead
(sweeps.trials.progress_callback):

- tracebacks Ray's loggers print (a trial task that failed, a sync that failed): to the log; on the console,
  nothing for a trial's failure (its callback line says it), else the record's first line and where the rest is;
- tracebacks MLflow's loggers print (its SQLAlchemy store on a full disk, a lost server): to the log only, since
  every such failure reaches the sweep's Tracker, whose one `[tracking]` line says it and keeps the operations;
- what Ray's raylet and autoscaler publish to the driver ("A worker died or was killed ...": the trial's line
  says it): to the log only;
- Tune's own tables of trials and results, and its print of every trial error: off (its legacy reporter at
  verbosity 0 prints none of them);
- Tune's own advice after a stop ("Stop signal received ... Press CTRL+C ... to skip", "Resume experiment with:
  Tuner.restore(...)"): to the log only, since the driver says the stop and prints the sweep's own resume command
  (a further signal while it records the stop is ignored);
- Optuna's log lines ("A new study created ...") and the warnings Python's `warnings` raises in the driver (Optuna's
  ExperimentalWarning for the sampler's `group`, deprecations): to the log only.

Writing the log never fails the sweep: on a full disk what cannot be written is dropped.
"""
from __future__ import annotations

import contextlib
import logging
import os
import time
from pathlib import Path

TRACEBACK = "Traceback (most recent call last)"
TUNE_STOP_ADVICE = ("Tuner.restore(", "Stop signal received")  # Tune's words after a stop (Ray 2.60's tune.py)


class SweepLog:
    """Where this driver's sweep log is (None: no sweep runs in this process, and Ray's output stays as it is)."""

    def __init__(self):
        self.path: Path | None = None

    def write(self, text: str) -> bool:
        if self.path is None:
            return False
        try:
            with open(self.path, "a") as f:
                f.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {text.rstrip()}\n")
        except OSError:
            pass  # e.g. the disk is full: the console line said what matters
        return True


LOG = SweepLog()


def console_line(message: str, has_traceback: bool, said_elsewhere: bool) -> str | None:
    """What of a log record the console shows: all of it without a traceback; with one, nothing when the sweep's
    own line says it (a failed trial task, a tracking store's failure), else its first line and where the rest is."""
    if not has_traceback:
        return message
    if said_elsewhere:
        return None
    first = message.split("\n", 1)[0].removesuffix(":")
    return f"{first} (details in {LOG.path})"


class ToSweepLog(logging.Filter):
    """On the handlers of the `ray` and `mlflow` loggers: records carrying a traceback go to the sweep's log, and
    the console gets `console_line` of them."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if LOG.path is not None and any(words in message for words in TUNE_STOP_ADVICE):
            LOG.write(f"{record.levelname} {record.name}: {message}")
            return False
        has_tb = bool(record.exc_info) or TRACEBACK in message
        if not has_tb or LOG.path is None:
            return True
        text = logging.Formatter().format(record)
        LOG.write(f"{record.levelname} {record.name}: {text}")
        said = message.startswith("Trial task failed") or record.name.split(".")[0] == "mlflow"
        shown = console_line(message, True, said)
        if shown is None:
            return False
        record.msg, record.args, record.exc_info, record.exc_text = shown, (), None, None
        return True


class ToLogFile(logging.Handler):
    """Writes a logger's records to the sweep's log (optuna's "A new study created ...", third-party warnings)."""

    def emit(self, record: logging.LogRecord) -> None:
        LOG.write(f"{record.levelname} {record.name}: {self.format(record)}")


QUIET = ("optuna", "py.warnings")  # their records go to the sweep's log only, while a stage runs


@contextlib.contextmanager
def _quiet_loggers():
    """optuna's log lines and Python warnings (Optuna's ExperimentalWarning, Ray's deprecations) to the log only."""
    import optuna

    optuna.logging.disable_default_handler()
    logging.captureWarnings(True)
    saved = []
    for name in QUIET:
        logger = logging.getLogger(name)
        saved.append((logger, logger.propagate, logger.level))
        logger.addHandler(ToLogFile())
        logger.propagate = False
        logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        for logger, propagate, level in saved:
            logger.handlers = [h for h in logger.handlers if not isinstance(h, ToLogFile)]
            logger.propagate, logger.level = propagate, level
        logging.captureWarnings(False)
        optuna.logging.enable_default_handler()


_RAY_PRINT = []  # Ray's own printer of what is published to the driver, once replaced


def _publish_to_log(data: dict, ignore_prefix: bool = False) -> None:
    """In place of Ray's print of what the raylet and autoscaler publish to the driver (outside a sweep: Ray's)."""
    if not LOG.write(f"[ray {data.get('pid', '')}] " + "\n".join(data.get("lines", []))):
        _RAY_PRINT[0](data, ignore_prefix=ignore_prefix)


@contextlib.contextmanager
def diverted(path: Path):
    """While inside, Ray's tracebacks and raylet messages in this process go to `path` (see the module's doc)."""
    from .trials.ray_private import driver_printer, set_driver_printer

    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")  # read by each fit(): Tune's trial tables off
    import mlflow  # noqa: F401  (its import gives the `mlflow` logger its console handler, filtered here)

    for handler in (*logging.getLogger("ray").handlers, *logging.getLogger("mlflow").handlers):
        if not any(isinstance(f, ToSweepLog) for f in handler.filters):
            handler.addFilter(ToSweepLog())
    if driver_printer() is not _publish_to_log:
        _RAY_PRINT[:] = [driver_printer()]
        set_driver_printer(_publish_to_log)
    LOG.path = Path(path)
    try:
        with _quiet_loggers():
            yield LOG
    finally:
        LOG.path = None

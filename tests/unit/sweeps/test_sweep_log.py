"""The sweep's log: Ray's tracebacks and raylet messages go there, the console keeps one line or none."""
import logging

import ray._private.worker as ray_worker
import ray.exceptions

from sweeps import sweep_log
from sweeps.sweep_log import ToSweepLog, console_line, diverted


def _record(msg, exc=None, args=()):
    info = (type(exc), exc, None) if exc is not None else None
    return logging.LogRecord("ray.tune.execution.tune_controller", logging.ERROR, __file__, 1, msg, args, info)


def test_what_the_console_keeps_of_a_ray_record(tmp_path):
    with diverted(tmp_path / "sweep.log"):
        assert console_line("all of it", False, True) == "all of it"
        assert console_line("Trial task failed for trial t", True, True) is None
        assert console_line("Experiment state snapshotting failed:\nmore", True, False) == (
            f"Experiment state snapshotting failed (details in {tmp_path / 'sweep.log'})")


def test_a_failed_trial_tasks_traceback_goes_to_the_sweep_log_only(tmp_path):
    failed = ray.exceptions.RayTaskError("train", "Traceback (most recent call last):\n  boom", ValueError("y"))
    quiet = ToSweepLog()
    with diverted(tmp_path / "sweep.log"):
        assert not quiet.filter(_record("Trial task failed for trial %s", failed.as_instanceof_cause(), ("t1",)))
        other = _record("Syncing failed", OSError(28, "No space left on device"))
        assert quiet.filter(other)  # shown, as one line without its traceback
        assert other.getMessage() == f"Syncing failed (details in {tmp_path / 'sweep.log'})"
        assert other.exc_info is None
        inline = _record("Sync failed:\nTraceback (most recent call last):\n  File x")
        assert quiet.filter(inline) and "Traceback" not in inline.getMessage()
        plain = _record("Trial t1 started")
        assert quiet.filter(plain) and plain.getMessage() == "Trial t1 started"
    log = (tmp_path / "sweep.log").read_text()
    assert "Trial task failed for trial t1" in log and "boom" in log and "No space left on device" in log
    assert "Trial t1 started" not in log
    outside = _record("Trial task failed for trial %s", failed.as_instanceof_cause(), ("t2",))
    assert quiet.filter(outside) and outside.exc_info is not None  # no sweep runs: Ray's output as it is


def test_an_mlflow_store_traceback_goes_to_the_sweep_log_only(tmp_path):
    """On a full disk MLflow's SQLAlchemy store logs its error with a traceback before raising; the Tracker's own
    [tracking] line says it, so the console shows none of it (the CI log of stop 38 showed all of it)."""
    err = OSError(28, "database or disk is full")
    with diverted(tmp_path / "sweep.log"):
        handler = logging.getLogger("mlflow").handlers[0]
        assert any(isinstance(f, ToSweepLog) for f in handler.filters)
        store = logging.LogRecord("mlflow.store.db.utils", logging.ERROR, __file__, 1,
                                  "SQLAlchemy database error. The following exception is caught.\n%s", (err,),
                                  (OSError, err, None))
        assert not handler.filter(store)
        info = logging.LogRecord("mlflow.store.db.utils", logging.INFO, __file__, 1, "Creating initial tables", (),
                                 None)
        assert handler.filter(info) and info.getMessage() == "Creating initial tables"
        ray_named = logging.LogRecord("ray.mlflow_like", logging.ERROR, __file__, 1, "Sync failed", (),
                                      (OSError, err, None))
        assert ToSweepLog().filter(ray_named)  # only MLflow's own loggers are silenced, not a name containing it
    log = (tmp_path / "sweep.log").read_text()
    assert "ERROR mlflow.store.db.utils: SQLAlchemy database error" in log and "database or disk is full" in log
    assert "Creating initial tables" not in log


def test_raylet_messages_go_to_the_sweep_log_and_to_rays_printer_outside_a_sweep(tmp_path, monkeypatch):
    with diverted(tmp_path / "sweep.log"):
        assert ray_worker.print_to_stdstream is sweep_log._publish_to_log  # the name Ray 2.60 prints with
        assert any(isinstance(f, ToSweepLog) for h in logging.getLogger("ray").handlers for f in h.filters)
        ray_worker.print_to_stdstream({"lines": ["A worker died or was killed"], "pid": "raylet", "is_err": False},
                                      ignore_prefix=False)
    assert "[ray raylet] A worker died or was killed" in (tmp_path / "sweep.log").read_text()
    printed = []
    monkeypatch.setattr(sweep_log, "_RAY_PRINT", [lambda data, ignore_prefix: printed.append(data["lines"])])
    ray_worker.print_to_stdstream({"lines": ["later"], "pid": "raylet", "is_err": False}, ignore_prefix=False)
    assert printed == [["later"]] and "later" not in (tmp_path / "sweep.log").read_text()


def test_a_log_that_cannot_be_written_never_fails_the_sweep(tmp_path):
    with diverted(tmp_path / "missing" / "sweep.log") as log:
        assert log.write("dropped")


def test_the_log_is_written_only_in_a_sweep_one_stamped_line_per_message(tmp_path):
    import re

    assert sweep_log.SweepLog().write("nowhere") is False  # no sweep runs in this process yet
    with diverted(tmp_path / "sweep.log"):
        sweep_log._publish_to_log({"lines": ["no pid given"]})
        sweep_log.LOG.write("two\nlines\n\n")
    lines = (tmp_path / "sweep.log").read_text().splitlines()
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \[ray \] no pid given", lines[0]), lines
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d two", lines[1]) and lines[2:] == ["lines"], lines


def test_tunes_own_resume_advice_goes_to_the_sweep_log_only(tmp_path):
    """After a stop the driver prints the sweep's resume command; Tune's Tuner.restore(...) line and its 'press
    CTRL+C again' would contradict it on the console."""
    quiet = ToSweepLog()
    words = ("Experiment has been interrupted, but the most recent state was saved.\nResume experiment with: "
             "Tuner.restore(path=\"/x/tune/search\", trainable=...)")
    stop = "Stop signal received (e.g. via SIGINT/Ctrl+C), ending Ray Tune run. Press CTRL+C to skip."
    with diverted(tmp_path / "sweep.log"):
        for msg in (words, stop):
            assert not quiet.filter(logging.LogRecord("ray.tune.tune", logging.WARNING, __file__, 1, msg, (), None))
        assert quiet.filter(logging.LogRecord("ray.tune.tune", logging.WARNING, __file__, 1, "Wrote the state", (),
                                              None))
    log = (tmp_path / "sweep.log").read_text()
    assert 'Tuner.restore(path="/x/tune/search"' in log and "Stop signal received" in log and "Wrote" not in log
    assert quiet.filter(logging.LogRecord("ray.tune.tune", logging.WARNING, __file__, 1, words, (), None))  # outside

"""The sweep's progress lines: trials done out of what the spec asked for, and the time left from measured epochs."""
import io
import sys
from types import SimpleNamespace

import sweeps.trials.progress_callback as progress
from ssat.config import from_dict
from ssat.presets import preset
from sweeps.trials.progress_callback import ProgressCallback, duration


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def _base(epochs: int) -> dict:
    return from_dict(preset("mnist5k-ssat-mbi"), {"optim.epochs": epochs, "optim.lr_milestones": [],
                                                  "optim.lr_factors": [], "attack.schedule": "const"}).to_dict()


def _trial(tid, epochs=3, sampled=None, row="r", scheduler=None):
    """A trial as Tune holds it (sweeps.trials.trial_settings): a grid row's, or with `sampled` a search's."""
    meta = {"sweep": "s", "stage": "search" if sampled else "grid", "row": "" if sampled else row, "seed": 0,
            **({"scheduler": scheduler} if scheduler else {})}
    cfg = {"trial": {"meta": meta, "base": _base(epochs)}, **(sampled or {})}
    return SimpleNamespace(trial_id=tid, config=cfg, last_result={}, status="RUNNING", error_file=None)


def test_duration_reads_at_a_glance():
    assert [duration(s) for s in (4.4, 59.6, 61, 3599, 3600, 7380)] == [
        "4 s", "1 min 00 s", "1 min 01 s", "59 min 59 s", "1 h 00 min", "2 h 03 min"]


def test_eta_from_epochs_seen_in_this_driver(monkeypatch, capsys):
    clock = Clock()
    monkeypatch.setattr(progress.time, "perf_counter", clock)
    cb = ProgressCallback(total=2, total_epochs=6)
    a, b = _trial("a"), _trial("b", sampled={"method.beta": 0.123456})
    clock.t += 10
    cb.on_trial_result(0, [a, b], a, {"epoch": 1, "val/clean": 50.0, "val/pgd10": 20.0, "perf/epoch_seconds": 9.5})
    line = capsys.readouterr().out
    # 1 epoch in 10 s, 5 left: 50 s
    assert "] r s0: epoch 1 val clean 50.0 pgd10 20.0 (9.5 s) | 0/2 trials done, about 50 s left" in line
    cb.on_trial_result(0, [a, b], b, {"epoch": 1})
    h = from_dict(_base(3), {"method.beta": 0.123456}).config_hash()
    assert f"] beta=0.12 #{h[:4]} s0: epoch 1" in capsys.readouterr().out  # a search trial names what was sampled
    clock.t += 10
    cb.on_trial_result(0, [a, b], a, {"epoch": 2})
    assert "about 20 s left" in capsys.readouterr().out  # 3 epochs ran in 20 s, 3 left


def test_a_restored_driver_does_not_count_earlier_epochs_as_its_speed(monkeypatch, capsys):
    clock = Clock()
    monkeypatch.setattr(progress.time, "perf_counter", clock)
    cb = ProgressCallback(total=1, total_epochs=10)
    a = _trial("a", epochs=10)
    clock.t += 5
    cb.on_trial_result(0, [a], a, {"epoch": 8})  # resumed from epoch 7: one epoch ran here, in 5 s
    assert "about 10 s left" in capsys.readouterr().out


def test_an_early_stop_takes_its_remaining_epochs_out(monkeypatch, capsys):
    clock = Clock()
    monkeypatch.setattr(progress.time, "perf_counter", clock)
    cb = ProgressCallback(total=2, total_epochs=8)
    a, b = _trial("a", epochs=4, scheduler="asha"), _trial("b", epochs=4, scheduler="asha")
    clock.t += 4
    cb.on_trial_result(0, [a, b], a, {"epoch": 1})
    cb.on_trial_result(0, [a, b], a, {"epoch": 2})
    a.last_result = {"epoch": 2}
    cb.on_trial_complete(0, [a, b], a)
    assert "stopped early by the scheduler after epoch 2" in capsys.readouterr().out
    assert cb.total_epochs == 6
    cb.on_trial_result(0, [a, b], b, {"epoch": 1})
    assert "about 4 s left" in capsys.readouterr().out  # 3 epochs in 4 s; 6 - 3 = 3 left
    b.last_result, b.status = {"epoch": 4, "time/epochs": 4}, "TERMINATED"
    cb.on_trial_complete(0, [a, b], b)
    assert "finished (1/2 trials done" in capsys.readouterr().out


def test_no_estimate_before_an_epoch_finished():
    assert ProgressCallback(total=1, total_epochs=3).eta() == ""


def test_the_final_evaluation_is_followed_from_the_trial_log(monkeypatch, capsys, tmp_path):
    clock = Clock()
    monkeypatch.setattr(progress.time, "perf_counter", clock)
    cb = ProgressCallback(total=1, total_epochs=3)
    a = _trial("a", epochs=3)
    log = tmp_path / "trial.log"
    log.write_text("10:00:00 trial x on vm\n10:00:05 epoch 1/3 | loss 2.0\n")
    cb.on_trial_result(0, [a], a, {"epoch": 1, "work_dir": str(tmp_path)})
    assert cb.logs == {}  # two epochs to go: nothing to follow yet
    log.write_text(log.read_text() + "10:00:10 epoch 2/3 | loss 1.8\n")
    cb.on_trial_result(0, [a], a, {"epoch": 2, "work_dir": str(tmp_path)})
    capsys.readouterr()
    with open(log, "a") as f:
        f.write("10:00:15 epoch 3/3 | loss 1.7\n10:00:15 final evaluation: best checkpoint on 1,000 test images, "
                "PGD-10, PGD-20, AutoAttack on 100\n10:00:20   [best] pgd10: 70.00%\n10:00:21   [best] pgd2")
    clock.t += 1  # within POLL_S of the last look: not read
    cb.on_step_begin(0, [a])
    clock.t += 2
    cb.on_step_begin(0, [a])
    out = capsys.readouterr().out.splitlines()
    # the epoch line is not repeated (its report says it); the half-written line waits
    assert [ln.split("] ", 1)[1] for ln in out] == [
        "r s0: final evaluation: best checkpoint on 1,000 test images, PGD-10, PGD-20, AutoAttack on 100",
        "r s0: [best] pgd10: 70.00%"]
    with open(log, "a") as f:
        f.write("0: 68.00%\n10:00:22     autoattack: apgd-ce (1/4) on 100 images, 0 s so far\n"
                "10:01:00   [best] autoattack (100 images): 60.00% (after apgd-ce 62.00%)\n")
    cb.on_trial_result(0, [a], a, {"epoch": 3, "time/epochs": 3, "work_dir": str(tmp_path)})
    out = capsys.readouterr().out
    # the final report flushes what the log gained since the last look, then the trial is no longer followed
    assert "r s0: [best] pgd20: 68.00%" in out and "r s0: autoattack: apgd-ce (1/4)" in out
    assert "r s0: [best] autoattack (100 images): 60.00%" in out
    assert cb.logs == {}


def test_a_log_on_another_node_is_skipped(monkeypatch, capsys, tmp_path):
    cb = ProgressCallback(total=1, total_epochs=2)
    a = _trial("a", epochs=2)
    cb.on_trial_result(0, [a], a, {"epoch": 1, "work_dir": str(tmp_path / "elsewhere")})
    assert list(cb.logs) == ["a"]
    monkeypatch.setattr(progress.time, "perf_counter", lambda: 1e9)
    cb.on_step_begin(0, [a])  # no such file here: nothing printed, nothing raised
    assert "final" not in capsys.readouterr().out


def test_a_retried_trial_is_one_line_naming_it_the_attempt_the_epoch_and_why():
    from ray.exceptions import ActorDiedError, RayTaskError

    died = progress.failure_reason(ActorDiedError())
    assert died == "its worker process died (ActorDiedError)"
    raised = RayTaskError("train", "Traceback (most recent call last):\n  ...", OSError(28, "No space left on device"))
    assert progress.failure_reason(raised.as_instanceof_cause()) == "OSError: [Errno 28] No space left on device"
    assert progress.failure_reason(ValueError("first line\nsecond line")) == "ValueError: first line"
    assert progress.failure_reason(KeyError()) == "KeyError"
    assert progress.failure_reason(RuntimeError("x" * 500)) == "RuntimeError: " + "x" * 160
    assert progress.failure_reason(None) == "an error Ray did not keep"

    assert progress.retry_line("const|on seed 0", 1, 2, 1, died, "/t/error.txt") == (
        "[sweep] const|on seed 0: attempt 2 of 3, after epoch 1: its worker process died (ActorDiedError); it "
        "resumes from its last checkpoint (details: /t/error.txt)")
    assert progress.retry_line("r seed 1", 3, -1, 0, "E", None) == (
        "[sweep] r seed 1: attempt 4, before its first epoch: E; it resumes from its last checkpoint")


def test_on_trial_recover_prints_the_retry_line(capsys, tmp_path):
    from ray import cloudpickle
    from ray.exceptions import ActorDiedError

    cb = ProgressCallback(total=1, total_epochs=3)
    t = _trial("a")
    t.num_failures, t.max_failures, t.last_result = 1, 2, {"epoch": 2}
    t.error_file, t.pickled_error_file = "/staging/t/error.txt", str(tmp_path / "error.pkl")
    t.path = "/work/runs/sweeps/s/tune/grid/t"  # the trial's folder in storage: named, not the driver's staging
    (tmp_path / "error.pkl").write_bytes(cloudpickle.dumps(ActorDiedError()))  # Ray's pickle of the last error
    cb.on_trial_recover(0, [t], t)
    assert capsys.readouterr().out == ("[sweep] r s0: attempt 2 of 3, after epoch 2: its worker process died "
                                       "(ActorDiedError); it resumes from its last checkpoint (details: "
                                       "/work/runs/sweeps/s/tune/grid/t/error.txt)\n")
    (tmp_path / "error.pkl").write_bytes(b"torn")
    assert progress.last_error(t) is None
    t.pickled_error_file = None
    assert progress.last_error(t) is None


def test_a_trial_ended_early_where_no_scheduler_stops_trials_is_not_called_stopped_by_one(capsys):
    """Issue 44 item 6: a grid trial Tune completed after 4 of 12 epochs was announced as 'stopped early by the
    scheduler' (a grid has none): the line says it ended without its last epoch."""
    cb = ProgressCallback(total=1, total_epochs=12)
    a = _trial("a", epochs=12)
    a.last_result = {"epoch": 4}
    cb.on_trial_complete(0, [a], a)
    out = capsys.readouterr().out
    assert "ended after epoch 4 of 12 without its last: Tune completed it early, and the stage is incomplete" in out
    assert "scheduler" not in out and cb.total_epochs == 4


# ---- every line in full, flushed at once ----------------------------------------------------------------------
class Console(io.StringIO):
    """sys.stdout as Ray's log capture sees it: a line shows only once flushed."""

    def __init__(self):
        super().__init__()
        self.shown = ""

    def flush(self):
        self.shown = self.getvalue()


def watch(monkeypatch) -> Console:
    """The console from here on (set inside the test: pytest's capture puts its own back between phases)."""
    out = Console()
    monkeypatch.setattr(sys, "stdout", out)
    return out


def test_every_line_in_full_and_flushed_at_once(monkeypatch, tmp_path):
    console = watch(monkeypatch)
    clock = Clock()
    monkeypatch.setattr(progress.time, "perf_counter", clock)
    cb = ProgressCallback(total=2, total_epochs=6)
    a, b = _trial("a"), _trial("b", row="q")
    clock.t += 65
    cb.on_trial_result(0, [a, b], a, {"epoch": 1})
    assert console.shown == "[sweep 1 min 05 s] r s0: epoch 1 (0.0 s) | 0/2 trials done, about 5 min 25 s left\n"
    cb.on_trial_result(0, [a, b], b, {})  # a report without an epoch (none seen yet)
    assert console.shown.splitlines()[-1] == "[sweep 1 min 05 s] q s0: epoch 0 (0.0 s) | 0/2 trials done, about 2 " \
                                             "min 42 s left"  # it counts as one epoch run
    cb.on_trial_result(0, [a, b], a, {"epoch": 2, "failed_reason": "no teacher"})
    assert console.shown.splitlines()[-1] == "[sweep] r s0: stopped: no teacher"
    a.last_result = {"epoch": 2, "failed_reason": "no teacher"}
    before, total = console.getvalue(), cb.total_epochs
    cb.on_trial_complete(0, [a, b], a)  # said at its report: nothing more, nothing taken out
    assert (console.getvalue(), cb.total_epochs) == (before, total)
    b.last_result = {"epoch": 3}  # completed early, no scheduler: its 0 remaining epochs (not 1) taken out
    cb.on_trial_complete(0, [a, b], b)
    assert console.shown.splitlines()[-1] == ("[sweep] q s0: ended after epoch 3 of 3 without its last: Tune "
                                              "completed it early, and the stage is incomplete")
    assert cb.total_epochs == 6
    early = _trial("e", scheduler="asha")
    early.last_result = {"epoch": 1}
    cb.on_trial_complete(0, [early], early)
    assert console.shown.splitlines()[-1] == "[sweep] r s0: stopped early by the scheduler after epoch 1"
    cb.total_epochs = 6
    c = _trial("c")
    c.last_result = None  # no report at all: all three of its epochs out
    cb.on_trial_complete(0, [c], c)
    assert cb.total_epochs == 3
    cb.on_trial_error(0, [c], c)
    assert console.shown.splitlines()[-1] == "[sweep] r s0 FAILED (None)"
    c.last_result, c.status = {"epoch": 3, "time/epochs": 3}, "TERMINATED"
    cb.on_trial_complete(0, [c], c)
    assert console.shown.splitlines()[-1].startswith("[sweep] r s0 finished (1/2 trials done")
    assert console.shown == console.getvalue()  # every line flushed


def test_a_trial_whose_config_cannot_be_built_is_named_by_its_id_and_not_followed(monkeypatch, tmp_path):
    console = watch(monkeypatch)
    cb = ProgressCallback(total=1, total_epochs=3)
    odd = SimpleNamespace(trial_id="t9", config={"trial": {"meta": {}, "base": {"bogus": 1}}},
                          last_result={"epoch": 1}, status="RUNNING", error_file=None)
    cb.on_trial_result(0, [odd], odd, {"epoch": 1, "work_dir": str(tmp_path)})
    assert cb.logs == {}  # its epochs unknown (0): not taken for its last
    cb.on_trial_complete(0, [odd], odd)
    assert console.shown.splitlines()[-1].startswith("[sweep] trial t9: ended after epoch 1 of ? without its last")


def test_two_finished_trials_count_two(monkeypatch):
    console = watch(monkeypatch)
    cb = ProgressCallback(total=2, total_epochs=2)
    a, b = _trial("a", epochs=1), _trial("b", epochs=1)
    cb.on_trial_result(0, [a, b], a, {"epoch": 1, "time/epochs": 1})
    cb.on_trial_result(0, [a, b], b, {"epoch": 1, "time/epochs": 1})
    assert "| 2/2 trials done" in console.shown.splitlines()[-1]


def test_the_time_left_ends_at_the_last_epoch_and_covers_the_outer_job(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(progress.time, "perf_counter", clock)
    cb = ProgressCallback(total=1, total_epochs=3)
    clock.t += 10
    cb.epoch, cb.first = {"a": 2}, {"a": 0}  # 2 epochs in 10 s, 1 left
    assert cb.eta() == ", about 5 s left"
    with progress.outer_job("make paper", 4):
        assert cb.eta() == ", about 5 s left (make paper: about 25 s)"  # (1 + 4) epochs at 5 s
    assert cb.eta() == ", about 5 s left"
    cb.epoch = {"a": 3}
    assert cb.eta() == ""  # nothing left


def test_the_log_is_followed_from_its_size_at_the_last_epoch_and_looked_at_every_two_seconds(monkeypatch,
                                                                                           tmp_path):
    console = watch(monkeypatch)
    clock = Clock()
    monkeypatch.setattr(progress.time, "perf_counter", clock)
    cb = ProgressCallback(total=1, total_epochs=2)
    a = _trial("a", epochs=2)
    cb.on_step_begin(0, [a])  # the first step looks (nothing to follow yet)
    assert cb.polled == clock.t
    log = tmp_path / "trial.log"
    cb.on_trial_result(0, [a], a, {"epoch": 1, "work_dir": str(tmp_path)})  # no log yet: from its start
    log.write_bytes(b"10:00:00 final evaluation: on \xff test images\nfinal evaluation without a time\n"
                    b"10:00:01\tfinal evaluation after a tab\n")
    clock.t += 2.0  # exactly POLL_S after the last look: looks
    cb.on_step_begin(0, [a])
    assert console.shown.splitlines()[-2:] == ["[sweep 2 s] r s0: final evaluation: on \ufffd test images",
                                               "[sweep 2 s] r s0: final evaluation without a time"]
    b = _trial("b", epochs=2)
    old = tmp_path / "b"
    old.mkdir()
    (old / "trial.log").write_text("10:00:00 final evaluation of an earlier attempt\n")
    cb.on_trial_result(0, [b], b, {"epoch": 1, "work_dir": str(old)})
    assert cb.logs["b"][1] == len("10:00:00 final evaluation of an earlier attempt\n")  # what was there is old


def test_a_retry_line_counts_attempts_of_max_failures_plus_one_and_finds_the_error_file(monkeypatch, tmp_path):
    console = watch(monkeypatch)
    assert progress.retry_line("r", 0, 0, 0, "x", None) == ("[sweep] r: attempt 1 of 1, before its first epoch: x; "
                                                            "it resumes from its last checkpoint")
    assert "attempt 2, after epoch 3" in progress.retry_line("r", 1, -1, 3, "x", None)  # unlimited retries
    t = _trial("a")
    t.num_failures, t.max_failures, t.last_result, t.error_file = 1, 2, None, "/storage/a/error.txt"
    cb = ProgressCallback(total=1, total_epochs=3)
    cb.on_trial_recover(0, [t], t)  # no path, no pickled error
    assert console.shown == ("[sweep] r s0: attempt 2 of 3, before its first epoch: an error Ray did not keep; it "
                             "resumes from its last checkpoint (details: /storage/a/error.txt)\n")


def test_a_failure_reason_is_its_first_line():
    assert progress.failure_reason(ValueError("bad beta\nmore\nand more")) == "ValueError: bad beta"
    assert progress.failure_reason(ValueError("")) == "ValueError"
    assert progress.last_error(SimpleNamespace()) is None  # Ray kept no pickle of it

"""The sweep's progress lines: trials done out of what the spec asked for, and the time left from measured epochs."""
from types import SimpleNamespace

import sweeps.progress as progress
from sweeps.progress import ProgressCallback, duration


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def _trial(tid, epochs=3, sampled=None, row="r"):
    cfg = {"meta": {"row": row, "seed": 0}, "base": {"optim": {"epochs": epochs}}, **(sampled or {})}
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
    assert "r seed 0: epoch 1 val clean 50.0 pgd10 20.0 (9.5 s) | 0/2 trials done, about 50 s left" in line
    cb.on_trial_result(0, [a, b], b, {"epoch": 1})
    assert "r (beta=0.123) seed 0: epoch 1" in capsys.readouterr().out  # a search trial names what was sampled
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
    a, b = _trial("a", epochs=4), _trial("b", epochs=4)
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

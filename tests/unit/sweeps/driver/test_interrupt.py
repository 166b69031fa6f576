"""How a sweep is stopped (sweeps/driver/interrupt.py): Ctrl+C, SIGTERM and SIGHUP become Tune's stop signal inside
a Tune stage and KeyboardInterrupt elsewhere, each stop named in the runs' reasons; a block a signal must not cut;
and after a hang-up the console writes go nowhere (checked on a real pseudo-terminal in a child process)."""
from __future__ import annotations

import os
import pty
import select
import signal

import pytest

from sweeps.driver.interrupt import Interrupt


def test_ctrl_c_becomes_tunes_stop_signal_inside_a_stage_and_keyboardinterrupt_outside():
    got = []
    old_usr1 = signal.signal(signal.SIGUSR1, lambda s, f: got.append("usr1"))
    before = signal.getsignal(signal.SIGINT)
    try:
        stop = Interrupt()
        with stop.installed():
            assert os.environ["TUNE_DISABLE_SIGINT_HANDLER"] == "1"
            with stop.tune_stage():
                os.kill(os.getpid(), signal.SIGINT)
            assert stop.requested and got == ["usr1"]
            with pytest.raises(KeyboardInterrupt):  # outside Tune (the teacher stage)
                os.kill(os.getpid(), signal.SIGINT)
        assert signal.getsignal(signal.SIGINT) is before and "TUNE_DISABLE_SIGINT_HANDLER" not in os.environ
        again = Interrupt()
        with again.installed(), again.tune_stage():
            os.kill(os.getpid(), signal.SIGINT)
            with pytest.raises(KeyboardInterrupt):  # a second Ctrl+C does not wait for Tune
                os.kill(os.getpid(), signal.SIGINT)
    finally:
        signal.signal(signal.SIGUSR1, old_usr1)


def test_a_signals_cause_is_the_stoppers_first_line_else_the_signals_name(tmp_path):
    """settle's stop_cause names the stop; a file that is missing, blank or unreadable never breaks the handler."""
    cause_file = tmp_path / "stop_cause"
    stop = Interrupt(cause_file)
    assert stop.signal_cause(signal.SIGINT) == "Ctrl+C"  # missing
    cause_file.write_text("  \n\n")
    assert stop.signal_cause(signal.SIGTERM) == "SIGTERM"  # blank
    cause_file.write_bytes(b"\xff\xfe not text")
    assert stop.signal_cause(signal.SIGHUP) == "SIGHUP"  # not UTF-8
    cause_file.write_text("\n SLURM ended job 7 (scancel)\nmore\n")
    assert stop.signal_cause(signal.SIGINT) == "SLURM ended job 7 (scancel)"
    assert Interrupt().signal_cause(signal.SIGINT) == "Ctrl+C"


def test_sigterm_inside_a_slurm_job_names_slurm_until_settle_says_more(tmp_path, monkeypatch):
    """SLURM's scancel or requeue sends SIGTERM to every process of the job, so the driver can get it before settle
    has written stop_cause (CI, 2026-11-28: its runs then said "interrupted (SIGTERM)"): SIGTERM in a SLURM job is
    SLURM's, in the words settle uses; other signals, and SIGTERM outside SLURM, keep their names."""
    cause_file = tmp_path / "stop_cause"
    stop = Interrupt(cause_file)
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    assert stop.signal_cause(signal.SIGTERM) == "SIGTERM"
    monkeypatch.setenv("SLURM_JOB_ID", "42")
    assert stop.signal_cause(signal.SIGTERM) == "SLURM ended job 42 (scancel, a requeue or its time limit)"
    assert [stop.signal_cause(s) for s in (signal.SIGINT, signal.SIGHUP)] == ["Ctrl+C", "SIGHUP"]
    cause_file.write_text("the time limit of SLURM job 42\n")
    assert stop.signal_cause(signal.SIGTERM) == "the time limit of SLURM job 42"  # settle's file still wins


@pytest.mark.parametrize("sig, cause", [(signal.SIGTERM, "SIGTERM"), (signal.SIGHUP, "SIGHUP")])
def test_sigterm_and_sighup_stop_a_sweep_as_ctrl_c_does_and_say_which(sig, cause):
    got = []
    old_usr1 = signal.signal(signal.SIGUSR1, lambda s, f: got.append("usr1"))
    before = signal.getsignal(sig)
    try:
        stop = Interrupt()
        with stop.installed(), stop.tune_stage():
            os.kill(os.getpid(), sig)
            assert (stop.cause, got) == (cause, ["usr1"])
            os.kill(os.getpid(), signal.SIGINT)  # a later Ctrl+C hurries it, and the first cause stays
            pytest.fail("a second stop signal must raise KeyboardInterrupt")
    except KeyboardInterrupt:
        assert stop.cause == cause and got == ["usr1"]
    finally:
        signal.signal(signal.SIGUSR1, old_usr1)
    assert signal.getsignal(sig) is before


def test_a_stop_asked_inside_a_held_block_comes_at_its_end_and_a_lost_one_at_the_check():
    """A signal inside the local Ray's start is held to the block's end (a KeyboardInterrupt raised inside ray.init
    was dropped by Python in its logging's lock release, and the sweep ran on); a stop whose KeyboardInterrupt was
    lost is raised again at the stage's end; a signal while the stop is recorded is ignored."""
    stop = Interrupt()
    with pytest.raises(KeyboardInterrupt):
        with stop.held():
            stop._handler(signal.SIGTERM, None)  # no raise here
            reached = True
    assert reached and stop.cause == "SIGTERM"
    lost = Interrupt()
    with pytest.raises(KeyboardInterrupt):
        lost._handler(signal.SIGINT, None)
    with pytest.raises(KeyboardInterrupt):
        lost.check()  # raised again at the stage's end
    Interrupt().check()  # nothing asked: nothing raised
    quiet = Interrupt()
    quiet.stopping = True
    quiet._handler(signal.SIGINT, None)  # while the stop is recorded
    assert quiet.cause is None

def test_a_new_interrupt_has_asked_nothing_and_outside_tune_a_request_is_not_forwarded():
    stop = Interrupt()
    assert vars(stop) == {"cause": None, "in_tune": False, "cause_file": None, "stopping": False, "holding": False}
    assert stop.request("Ctrl+C") is False and stop.cause == "Ctrl+C"  # a handler then raises KeyboardInterrupt


def test_inside_tune_the_first_request_is_forwarded_as_sigusr1_and_a_second_is_not():
    got = []
    old_usr1 = signal.signal(signal.SIGUSR1, lambda s, f: got.append("usr1"))
    try:
        stop = Interrupt()
        with stop.tune_stage():
            assert stop.request("SIGTERM") is True and got == ["usr1"]
            assert stop.request("Ctrl+C") is False and got == ["usr1"] and stop.cause == "SIGTERM"
        assert stop.in_tune is False
    finally:
        signal.signal(signal.SIGUSR1, old_usr1)


def on_a_terminal(body) -> str:
    """What `body()` writes to its terminal, run in a forked child of this process (so the code under test is this
    process's) whose stdout and stderr are one pseudo-terminal, as in an ssh session."""
    from sweeps.driver import interrupt

    # Called here too, where it changes nothing (pytest's captured output is no terminal), so that mutmut, which
    # records what each test calls in the test's own process, runs this test for the function's mutants.
    if not (os.isatty(1) or os.isatty(2)):  # `pytest -s` in a terminal: its output would go nowhere
        interrupt._quiet_console()
        recording = Interrupt()
        recording.stopping = True  # the handler then only silences a terminal (none here) and returns
        recording._handler(signal.SIGHUP, None)
    main, tty = pty.openpty()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.dup2(tty, 1)
            os.dup2(tty, 2)
            body()
            code = 0
        finally:
            os._exit(code)
    os.close(tty)
    out = b""
    try:
        while True:
            ready, _, _ = select.select([main], [], [], 30)
            if not ready:
                break
            try:
                chunk = os.read(main, 4096)
            except OSError:  # EIO: the child closed its end
                break
            if not chunk:
                break
            out += chunk
    finally:
        os.close(main)
        _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, f"the child failed: {out.decode()!r}"
    return out.decode()


def ctrl_c_then_hang_up() -> None:
    stop = Interrupt()
    with stop.installed():
        try:
            os.kill(os.getpid(), signal.SIGINT)
        except KeyboardInterrupt:
            os.write(1, b"out-after-int ")
            os.write(2, b"err-after-int ")
        try:
            os.kill(os.getpid(), signal.SIGHUP)
        except KeyboardInterrupt:
            os.write(1, b"out-after-hup ")
            os.write(2, b"err-after-hup ")


def test_after_a_hang_up_the_console_writes_go_nowhere_and_after_ctrl_c_they_still_show():
    said = on_a_terminal(ctrl_c_then_hang_up)
    assert "out-after-int err-after-int" in said and "after-hup" not in said, said

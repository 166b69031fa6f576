"""Every `python -m ssat.*` command ends a person's mistake as one line (`error: ...`, exit code 2), never a
traceback; `ssat.evaluate` prints its progress on stderr and one JSON document on stdout, and scores a checkpoint
exactly as the trainer's final evaluation did (issue 44, items 7 and 10)."""
from __future__ import annotations

import json
import pickle

import pytest

from ssat.entry import entry_point, is_user_error, positive_int
from ssat.config import ConfigError
from ssat.evaluate import main as evaluate_main
from ssat.synthetic import write_cifar10
from ssat.teacher import main as teacher_main
from ssat.train import Trainer, main as train_main
from tests.unit.ssat.test_train import fake_teacher, tiny


def one_line_error(capsys, rc: int) -> str:
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    return err


def test_a_planted_cifar_batch_ends_ssat_train_in_one_line_before_anything_runs(tmp_path, capsys):
    write_cifar10(tmp_path, 50, 10)
    bad = tmp_path / "cifar-10-batches-py" / "data_batch_2"
    bad.write_bytes(pickle.dumps({"data": [1], "labels": [0]}))
    err = one_line_error(capsys, train_main(["--preset", "cifar10-ssat-mbi", "--data-root", str(tmp_path),
                                             "--out", str(tmp_path / "out"), "--set", "model.name=cnn-small"]))
    assert f"{bad}: 'data' is a list" in err


@pytest.mark.parametrize("main, argv, says", [
    (train_main, ["--preset", "nope"], "error: --preset: preset 'nope' is unknown; valid: "),
    (train_main, ["--epochs", "2"], "the smallest --epochs that keeps them apart is 4"),
    (train_main, ["--set", "method.beta=-1"], "method.beta"),
    (teacher_main, ["--preset", "nope"], "error: --preset: preset 'nope' is unknown"),
    (evaluate_main, ["/no/such/best.pt"], "/no/such/best.pt"),
])
def test_each_command_refuses_in_one_line(main, argv, says, capsys):
    assert says in one_line_error(capsys, main(argv))


def test_entry_point_keeps_a_bug_s_traceback_and_says_interrupted_on_ctrl_c(capsys):
    def bug(argv=None):
        raise RuntimeError("a bug")

    def stopped(argv=None):
        raise KeyboardInterrupt

    with pytest.raises(RuntimeError, match="a bug"):
        entry_point(bug)()
    assert entry_point(stopped)() == 130 and capsys.readouterr().err == "interrupted\n"
    assert is_user_error(ConfigError("x")) and is_user_error(FileNotFoundError("x"))
    assert not is_user_error(ValueError("x")) and not is_user_error(KeyError("x"))


@pytest.mark.parametrize("text, ok", [("1", 1), ("250", 250), ("0", None), ("-3", None), ("x", None), ("1.5", None)])
def test_counts_on_the_command_line_are_positive_integers(text, ok):
    import argparse

    if ok is None:
        with pytest.raises(argparse.ArgumentTypeError, match=rf"'{text}'; allowed: an integer >= 1"):
            positive_int(text)
    else:
        assert positive_int(text) == ok


def test_evaluate_scores_a_checkpoint_bit_for_bit_as_the_trainer_and_keeps_stdout_json(tmp_path, capsys):
    cfg = tiny(**{"optim.epochs": 2, "optim.lr_milestones": [2], "eval.pgd_steps": [10, 40], "eval.test_n": 100})
    trainer = Trainer(cfg, tmp_path / "run", teacher=fake_teacher(cfg), log=lambda s: None)
    trainer.fit()
    final = trainer.final_evaluation()["best"]
    capsys.readouterr()
    out_file = tmp_path / "again.json"
    assert evaluate_main([str(tmp_path / "run" / "best.pt"), "--out", str(out_file)]) == 0
    cap = capsys.readouterr()
    printed = json.loads(cap.out)  # the whole of stdout is one JSON document: `| jq` reads it
    assert "pgd40" in cap.err and "pgd40" in printed
    again = json.loads(out_file.read_text())
    for attack in ("clean", "pgd10", "pgd40"):
        assert again[attack]["acc"] == final[attack]["acc"], attack  # the same floats, not just close
        assert again[attack]["protocol"] == final[attack]["protocol"], attack
        assert printed[attack]["acc"] == round(final[attack]["acc"], 2)
    setup = final["pgd40"]["protocol"]
    assert (setup["batch_size"], setup["device"], setup["threads"]) == (cfg.eval.batch_size, "cpu", 1)
    assert isinstance(setup["fold_bn"], bool) and setup["memory_format"] in ("channels_last", "contiguous")
    # another batch size is a different setup, and the protocol record says which
    assert evaluate_main([str(tmp_path / "run" / "best.pt"), "--batch-size", "7", "--out", str(out_file)]) == 0
    assert json.loads(out_file.read_text())["pgd40"]["protocol"]["batch_size"] == 7


def test_a_message_of_several_lines_is_said_on_one_keeping_its_spacing():
    from ssat.entry import one_line
    assert one_line("a  b\nc\n\nd") == "a  b c  d"  # each newline a space, nothing else touched

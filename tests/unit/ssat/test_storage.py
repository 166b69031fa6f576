"""Verified files (ssat/storage.py): atomic writes, checksum sidecars, weights-only loading, user files."""
from __future__ import annotations

import hashlib
import io
import json
import math
import os
import zipfile

import pytest
import torch

from ssat.evaluate import main as evaluate_main
from ssat.pseudo_labels import PseudoLabelError, TeacherOutputs, load_teacher_outputs
from ssat.storage import (CorruptFileError, atomic_write_bytes, load_user_file, load_verified, save_verified,
                          sha256_file, sidecar, verify_file)
from tests.unit.sweeps.test_spec_bad_inputs import Env, checkpoint

ONLY = "only tensors, numbers, strings and lists/tuples/dicts of them are loaded"
OBJ = {"w": torch.arange(6, dtype=torch.float32).reshape(2, 3), "name": "x", "n": 3}


class Payload:
    """A pickled custom object whose unpickling would create a folder (the side effect of pickled code)."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return os.mkdir, (self.marker,)


def _same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys() and a["name"] == b["name"] and a["n"] == b["n"]
    assert torch.equal(a["w"], b["w"])


def test_the_file_holds_torch_saves_bytes_and_the_sidecar_their_sha256(tmp_path):
    path = tmp_path / "deep" / "er" / "best.pt"  # folders made on the way
    digest = save_verified(OBJ, path)
    buf = io.BytesIO()
    torch.save(OBJ, buf)
    assert path.read_bytes() == buf.getvalue()
    assert digest == hashlib.sha256(buf.getvalue()).hexdigest()
    assert (tmp_path / "deep" / "er" / "best.pt.sha256").read_bytes() == f"{digest}\n".encode()
    assert sorted(p.name for p in path.parent.iterdir()) == ["best.pt", "best.pt.sha256"]  # no temp file left
    _same(load_verified(path), OBJ)


def test_the_bytes_are_on_disk_in_a_hidden_temp_file_of_the_same_folder_before_the_rename(tmp_path, monkeypatch):
    """fsync sees the complete data in `.<name>.*.tmp` beside the target (same file system: the rename is
    atomic), and the target appears only after it."""
    path, seen, real_fsync = tmp_path / "state.pt", [], os.fsync

    def fsync(fd):
        tmp = [p for p in tmp_path.iterdir() if p.name != "state.pt"]
        seen.append(([p.name for p in tmp], [p.read_bytes() for p in tmp], path.read_bytes()))
        real_fsync(fd)

    path.write_bytes(b"old")
    monkeypatch.setattr(os, "fsync", fsync)
    atomic_write_bytes(path, b"new bytes")
    ((names, contents, target),) = seen
    assert len(names) == 1 and names[0].startswith(".state.pt.") and names[0].endswith(".tmp")
    assert contents == [b"new bytes"] and target == b"old"
    assert path.read_bytes() == b"new bytes" and [p.name for p in tmp_path.iterdir()] == ["state.pt"]


def test_sha256_file_is_the_sha256_of_the_files_bytes(tmp_path):
    data = bytes(range(256)) * 1000
    (tmp_path / "f").write_bytes(data)
    assert sha256_file(tmp_path / "f") == hashlib.sha256(data).hexdigest()


def test_a_failed_atomic_write_leaves_the_old_file_and_no_temp_file(tmp_path):
    path = tmp_path / "state.pt"
    atomic_write_bytes(path, b"old")
    with pytest.raises(TypeError):
        atomic_write_bytes(path, "not bytes")  # fails inside the write, after the temp file exists
    assert path.read_bytes() == b"old" and [p.name for p in tmp_path.iterdir()] == ["state.pt"]


def test_an_interrupt_right_after_the_rename_is_the_error_the_caller_sees(tmp_path, monkeypatch):
    # Ctrl+C between os.replace and leaving the write: the temp file is gone already (it is the file now), and
    # the cleanup must not replace the KeyboardInterrupt with a FileNotFoundError of its own
    real = os.replace

    def replace_then_interrupt(src, dst):
        real(src, dst)
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", replace_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        atomic_write_bytes(tmp_path / "state.pt", b"new")
    assert (tmp_path / "state.pt").read_bytes() == b"new" and len(list(tmp_path.iterdir())) == 1


def test_map_location_reaches_torch_load(tmp_path):
    save_verified(OBJ, tmp_path / "a.pt")
    assert load_verified(tmp_path / "a.pt", map_location="meta")["w"].device.type == "meta"
    obj, _ = load_user_file(tmp_path / "a.pt", map_location="meta")
    assert obj["w"].device.type == "meta"


def test_a_missing_sidecar_is_refused_naming_it(tmp_path):
    path = tmp_path / "best.pt"
    save_verified(OBJ, path)
    (tmp_path / "best.pt.sha256").unlink()
    with pytest.raises(CorruptFileError) as refused:
        load_verified(path)
    assert str(refused.value) == (f"{path}: its checksum file best.pt.sha256 is missing (files of a run folder and "
                                  "of the teacher cache are always written with one: this one was not written by "
                                  "ssat, or was altered)")
    with pytest.raises(FileNotFoundError, match=r"nope\.pt: no such file"):
        load_verified(tmp_path / "nope.pt")
    with pytest.raises(FileNotFoundError, match=r"nope\.pt: no such file"):
        load_user_file(tmp_path / "nope.pt")


@pytest.mark.parametrize("user", [False, True])
def test_a_modified_or_torn_file_with_its_sidecar_is_refused(tmp_path, user):
    load = (lambda p: load_user_file(p)[0]) if user else load_verified
    path = tmp_path / "best.pt"
    save_verified(OBJ, path)
    good = path.read_bytes()
    flipped = bytearray(good)
    flipped[len(good) // 2] ^= 0x01
    for bad in (bytes(flipped), good[: len(good) // 2]):
        path.write_bytes(bad)
        with pytest.raises(CorruptFileError) as refused:
            load(path)
        assert str(refused.value) == f"{path}: checksum mismatch with best.pt.sha256 (file torn or modified)"
    path.write_bytes(good)
    (tmp_path / "best.pt.sha256").write_text("0" * 64 + "\n")  # a tampered sidecar
    with pytest.raises(CorruptFileError, match="checksum mismatch"):
        load(path)


def test_a_user_file_without_sidecar_loads_unverified_and_with_one_verified(tmp_path):
    path = tmp_path / "mine.pt"
    torch.save(OBJ, path)
    obj, verified = load_user_file(path)
    _same(obj, OBJ)
    assert verified is False
    save_verified(OBJ, path)
    obj, verified = load_user_file(path)
    _same(obj, OBJ)
    assert verified is True


def test_a_torn_user_file_without_sidecar_is_refused(tmp_path):
    path = tmp_path / "mine.pt"
    torch.save(OBJ, path)
    path.write_bytes(path.read_bytes()[:200])
    with pytest.raises(CorruptFileError) as refused:
        load_user_file(path)
    assert str(refused.value).startswith(f"{path}: cannot be read as a checkpoint (RuntimeError: PytorchStreamReader ")


def test_a_pickled_custom_object_is_refused_and_its_code_never_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")  # torch's own default turned off: ours must hold
    marker = tmp_path / "ran"
    signed, plain = tmp_path / "signed.pt", tmp_path / "plain.pt"
    save_verified({"w": torch.zeros(1), "x": Payload(str(marker))}, signed)  # checksum fine: only pickle stops it
    torch.save({"x": Payload(str(marker))}, plain)
    for load in (load_verified, load_user_file):
        for path in (signed, plain) if load is load_user_file else (signed,):
            with pytest.raises(CorruptFileError) as refused:
                load(path)
            assert str(refused.value) == (f"{path}: refused: its pickle holds more than weights-only loading allows "
                                          f"(posix.mkdir); {ONLY}")
            assert not marker.exists()
    torch.load(plain, weights_only=False)  # what weights_only=True prevents: the payload runs
    assert marker.is_dir()


def test_a_pickle_opcode_weights_only_loading_does_not_know_is_refused(tmp_path):
    buf = io.BytesIO()
    torch.save({"a": 1}, buf)
    path = tmp_path / "odd.pt"
    with zipfile.ZipFile(io.BytesIO(buf.getvalue())) as good, zipfile.ZipFile(path, "w") as odd:
        for name in good.namelist():  # the same archive, its pickle replaced by EXT1 (an extension registry code)
            odd.writestr(name, b"\x80\x02\x82\x01." if name.endswith("data.pkl") else good.read(name))
    with pytest.raises(CorruptFileError) as refused:
        load_user_file(path)
    assert str(refused.value) == f"{path}: refused: its pickle holds more than weights-only loading allows; {ONLY}"


# ---- teacher files -------------------------------------------------------------------------------
def _teacher(**extra) -> dict:
    return {"logits": torch.randn(5, 10, generator=torch.Generator().manual_seed(0)), "split_hash": "b" * 16, **extra}


def _load_teacher(path, user_file=None):
    kw = {} if user_file is None else {"user_file": user_file}
    return load_teacher_outputs(path, split_hash="b" * 16, n_unlabeled=5, num_classes=10, **kw)


def test_the_teacher_cache_needs_its_sidecar_a_users_file_does_not(tmp_path):
    path = tmp_path / "teacher.pt"
    obj = _teacher(provenance={"key": "k"})
    torch.save(obj, path)
    for strict in (None, False):  # the default is the cache's rule
        with pytest.raises(CorruptFileError, match=r"teacher\.pt\.sha256 is missing"):
            _load_teacher(path, strict)
    out = _load_teacher(path, user_file=True)
    assert out.verified is False and out.provenance == {"key": "k", "verified": False}
    torch.testing.assert_close(out.logits, obj["logits"], rtol=0, atol=0)
    save_verified(obj, path)
    for user_file in (None, False, True):
        out = _load_teacher(path, user_file)
        assert out.verified is True and out.provenance == {"key": "k", "verified": True}
    bare = tmp_path / "bare.pt"
    torch.save(_teacher(), bare)  # no provenance at all
    assert _load_teacher(bare, user_file=True).provenance == {"verified": False}


def test_a_user_teacher_files_provenance_must_be_a_dict(tmp_path):
    path = tmp_path / "mine.pt"
    torch.save(_teacher(provenance="from my laptop"), path)
    with pytest.raises(PseudoLabelError,
                       match=r"data\.pseudo_labels: .*mine\.pt: 'provenance' must be a dict, got str"):
        _load_teacher(path, user_file=True)


def test_teacher_outputs_round_trip_through_the_cache_file(tmp_path):
    state = {"w": torch.ones(2, 2)}
    out = TeacherOutputs(torch.randn(5, 10, dtype=torch.float64), "b" * 16, "cnn-small", state,
                         {"torch": torch.__version__, "root": tmp_path, "acc": 91.5})  # not JSON types: as text
    out.save(tmp_path / "teacher.pt")
    back = _load_teacher(tmp_path / "teacher.pt")
    assert back.logits.dtype == torch.float32 and torch.equal(back.logits, out.logits.float())
    assert ((back.split_hash, back.model_name) == ("b" * 16, "cnn-small")
            and torch.equal(back.model_state["w"], state["w"]))
    assert back.provenance == {"torch": str(torch.__version__), "root": str(tmp_path), "acc": 91.5, "verified": True}


def test_probabilities_are_the_softmax_of_logits_over_the_temperature():
    out = TeacherOutputs(torch.tensor([[0.0, math.log(3.0)]]), "b" * 16)
    torch.testing.assert_close(out.probabilities(), torch.tensor([[0.25, 0.75]]))
    r = math.sqrt(3.0)  # softmax([0, ln 3 / 2]) = [1, sqrt 3] / (1 + sqrt 3)
    torch.testing.assert_close(out.probabilities(temperature=2.0), torch.tensor([[1 / (1 + r), r / (1 + r)]]))


def test_a_users_probabilities_may_hold_zeros_and_become_finite_logits(tmp_path):
    probs = torch.full((5, 10), 0.1)
    probs[0] = torch.tensor([0.0] * 9 + [1.0])  # a confident teacher: exact zeros
    probs[1, 0] += 0.0004  # a row summing to 1.0004: float noise, accepted
    path = tmp_path / "mine.pt"
    torch.save({"probs": probs, "split_hash": "b" * 16}, path)
    out = _load_teacher(path, user_file=True)
    assert torch.isfinite(out.logits).all() and out.logits[0, 0] == math.log(1e-12)
    torch.testing.assert_close(out.probabilities(), probs / probs.sum(1, keepdim=True), rtol=0, atol=1e-6)
    probs[1, 0] += 0.0016  # 1.002: not a probability row
    torch.save({"probs": probs, "split_hash": "b" * 16}, path)
    with pytest.raises(PseudoLabelError, match=r"mine\.pt: rows must be probabilities summing to 1 "
                                                r"\(found sums 1\.0000\.\.1\.0020\)"):
        _load_teacher(path, user_file=True)


@pytest.mark.parametrize("logits, got", [([[0.0] * 10] * 5, "got list"), (torch.zeros(5), r"got torch\.Size\(\[5\]\)"),
                                         (torch.zeros(5, 10, 1), r"got torch\.Size\(\[5, 10, 1\]\)")],
                         ids=["list", "1-D", "3-D"])
def test_logits_must_be_a_2d_tensor(tmp_path, logits, got):
    torch.save({"logits": logits, "split_hash": "b" * 16}, tmp_path / "mine.pt")
    with pytest.raises(PseudoLabelError,
                       match=r"data\.pseudo_labels: .*mine\.pt: expected a 2-D tensor \(N, C\), " + got):
        _load_teacher(tmp_path / "mine.pt", user_file=True)


@pytest.mark.parametrize("obj", [["logits", "probs"], torch.zeros(5, 10)], ids=["list", "tensor"])
def test_a_user_file_that_is_no_dict_is_refused(tmp_path, obj):
    torch.save(obj, tmp_path / "mine.pt")
    with pytest.raises(PseudoLabelError, match=r"data\.pseudo_labels: .*mine\.pt holds no 'logits' or 'probs' tensor"):
        _load_teacher(tmp_path / "mine.pt", user_file=True)


# ---- python -m ssat.evaluate PATH [--unverified] -------------------------------------------------
def test_evaluate_refuses_a_checkpoint_without_sidecar_unless_unverified(tmp_path, capsys):
    path = checkpoint(Env(tmp_path, None, None, []), **{"eval.pgd_steps": [1]})  # the Trainer's format
    args = [str(path), "--n", "4", "--no-autoattack", "--device", "cpu"]
    assert evaluate_main(args) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["verified"] is True
    (tmp_path / "best.pt.sha256").unlink()
    assert evaluate_main(args) == 2
    err = capsys.readouterr().err
    assert "best.pt.sha256 is missing" in err and "--unverified" in err
    out_file = tmp_path / "res.json"
    assert evaluate_main(args + ["--unverified", "--out", str(out_file)]) == 0
    printed = json.loads(capsys.readouterr().out.splitlines()[-1])
    stored = json.loads(out_file.read_text())
    for rec in (printed, stored):
        assert rec["verified"] is False and rec["checkpoint"] == str(path)
        assert set(rec) == {"checkpoint", "verified", "clean", "pgd1"}
    assert stored["clean"]["acc"] == pytest.approx(printed["clean"]["acc"], abs=0.005)
    path.write_bytes(path.read_bytes()[:200])  # torn and unverified: still refused, no hint to loosen more
    assert evaluate_main(args + ["--unverified"]) == 2
    err = capsys.readouterr().err
    assert "cannot be read as a checkpoint" in err and "--unverified" not in err


def test_verify_file_checks_in_place_and_names_the_file_and_its_sidecar(tmp_path):
    """verify_file: the checksum of an intact file; each fault named with the file's path and its sidecar's name."""
    f = tmp_path / "state.pt"
    save_verified({"w": torch.ones(3)}, f)
    assert verify_file(f) == hashlib.sha256(f.read_bytes()).hexdigest() == sidecar(f).read_text().strip()
    with pytest.raises(FileNotFoundError, match=rf"^{tmp_path}/gone\.pt: no such file$"):
        verify_file(tmp_path / "gone.pt")
    f.write_bytes(f.read_bytes()[:10])
    with pytest.raises(CorruptFileError, match=rf"^{f}: checksum mismatch with state\.pt\.sha256 \(file torn or "
                                               r"modified\)$"):
        verify_file(f)
    sidecar(f).unlink()
    with pytest.raises(CorruptFileError, match=rf"^{f}: its checksum file state\.pt\.sha256 is missing$"):
        verify_file(f)

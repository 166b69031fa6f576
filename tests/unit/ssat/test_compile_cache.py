"""The compile cache's bundle: published once per key, checked before it is unpacked, never read by another key, and
refused (with a warning, nothing unpacked) when its checksum fails. The folders here hold stand-in files; that
torch.compile really reads a bundle another process made is tests/integration/test_compile_cache.py."""
import json
import os
import tarfile
import warnings

import pytest

from ssat.compile_cache import MARKER, CompileCache, bundle_key

PARTS = {"torch": "2.14.1", "device": "NVIDIA H200", "model": "wrn-28-5", "method": "ssat-mbi", "sizes": [128, 128]}


@pytest.fixture(autouse=True)
def keep_env(monkeypatch):
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)  # activate() sets it: leave the process as it was


def compiled(cache: CompileCache, files: dict[str, bytes]) -> None:
    """What a compile leaves in the key's local folder (stand-ins for inductor's files)."""
    for rel, data in files.items():
        (cache.local / rel).parent.mkdir(parents=True, exist_ok=True)
        (cache.local / rel).write_bytes(data)


def cold_then_published(tmp_path, files, parts=PARTS):
    a = CompileCache(tmp_path / "shared", parts, log=lambda s: None, local_root=tmp_path / "node-a")
    assert a.activate().startswith("cold") and os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(a.local)
    compiled(a, files)
    assert a.publish().startswith("published")
    return a


def test_a_later_process_unpacks_the_bundle_the_first_published(tmp_path):
    files = {"fxgraph/ab/entry": b"graph", "triton/0/kernel.cubin": b"\x00\x01cubin", "locks/x.lock": b""}
    a = cold_then_published(tmp_path, files)
    ptr = json.loads(a.pointer.read_text())
    bundle = a.root / ptr["bundle"]
    assert bundle.exists() and (a.root / f"{bundle.name}.sha256").exists() and ptr["parts"] == PARTS
    with tarfile.open(bundle) as tar:
        assert sorted(tar.getnames()) == ["fxgraph/ab/entry", "triton/0/kernel.cubin"]  # no locks, no marker
    assert a.publish() is None  # once
    b = CompileCache(tmp_path / "shared", PARTS, log=lambda s: None, local_root=tmp_path / "node-b")
    assert b.activate().startswith("warm: unpacked") and os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(b.local)
    assert (b.local / "triton/0/kernel.cubin").read_bytes() == b"\x00\x01cubin"
    assert (b.local / "fxgraph/ab/entry").read_bytes() == b"graph"
    assert b.publish() is None  # a warm process publishes nothing
    c = CompileCache(tmp_path / "shared", PARTS, log=lambda s: None, local_root=tmp_path / "node-b")
    assert c.activate().startswith("warm:") and "already unpacked" in c.status  # same node: not again
    assert (c.local / MARKER).read_text() == (a.root / f"{bundle.name}.sha256").read_text()  # what was unpacked


@pytest.mark.parametrize("changed", ["torch", "device", "model", "method", "sizes"])
def test_another_stack_or_run_shape_never_reads_the_bundle(tmp_path, changed):
    cold_then_published(tmp_path, {"fxgraph/e": b"x"})
    other = {**PARTS, changed: "something else"}
    assert bundle_key(other) != bundle_key(PARTS)
    b = CompileCache(tmp_path / "shared", other, log=lambda s: None, local_root=tmp_path / "node-b")
    assert b.activate().startswith("cold") and not (b.local / "fxgraph").exists()


@pytest.mark.parametrize("damage", ["flip", "truncate", "sidecar"])
def test_a_bundle_that_fails_its_checksum_is_ignored_with_a_warning_and_never_unpacked(tmp_path, damage):
    a = cold_then_published(tmp_path, {"fxgraph/e": b"x" * 1000})
    bundle = a.root / json.loads(a.pointer.read_text())["bundle"]
    data = bytearray(bundle.read_bytes())
    if damage == "flip":
        data[600] ^= 1
        bundle.write_bytes(bytes(data))
    elif damage == "truncate":
        bundle.write_bytes(bytes(data[: len(data) // 2]))
    else:
        (a.root / f"{bundle.name}.sha256").unlink()
    lines = []
    b = CompileCache(tmp_path / "shared", PARTS, log=lines.append, local_root=tmp_path / "node-b")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        status = b.activate()
    assert status.startswith("ignored") and any("fails its SHA-256 check" in str(w.message) for w in caught)
    assert lines == [f"compile cache: {status}"]
    assert sorted(p.name for p in b.local.rglob("*")) == []  # nothing unpacked
    assert b.publish() is None  # and it does not overwrite the shared one


def test_the_pointer_names_a_file_in_the_shared_folder_only(tmp_path):
    a = cold_then_published(tmp_path, {"fxgraph/e": b"x"})
    outside = tmp_path / "elsewhere.tar"
    outside.write_bytes(b"not a bundle")
    a.pointer.write_text(json.dumps({"bundle": "../elsewhere.tar"}))
    b = CompileCache(tmp_path / "shared", PARTS, log=lambda s: None, local_root=tmp_path / "node-b")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert b.activate().startswith("ignored")  # read as shared/elsewhere.tar, which is not there


def test_without_a_shared_folder_it_compiles_locally_and_publishes_nothing(tmp_path):
    c = CompileCache(None, PARTS, log=lambda s: None, local_root=tmp_path / "node")
    assert c.activate().startswith("local:") and c.publish() is None

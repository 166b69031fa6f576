"""analysis/run_labels.py: a shortened run of one of the paper's schedules is labelled as that paper row (Table 3's
rows then meet the paper's numbers), and only when exactly one paper t scales to its t."""
import pytest

from analysis.run_labels import paper_t, schedule_label


@pytest.mark.parametrize("t,epochs,paper,want", [
    (35, 70, 100, 50), (42, 70, 100, 60), (49, 70, 100, 70),  # the miniature's Table 3 (sweeps/specs)
    (35, 70, 120, 60),                                         # the AWR ablation's Curious-(1.25,60) of 120
    (6, 10, 100, 60), (3, 6, 100, 50),
    (4, 6, 100, None),                                          # 60 and 70 both round to 4 of 6: neither said
    (3, 10, 100, None), (45, 70, 100, None)])                   # no paper t scales to it
def test_the_paper_t_a_shorter_run_was_scaled_from(t, epochs, paper, want):
    assert paper_t(t, epochs, paper) is want if want is None else paper_t(t, epochs, paper) == want


def _run(t, epochs, method="ssat-mbi", schedule="linear", gamma=None):
    row = {"linear": "Linear-{t}", "curious": "Curious-({gamma},{t})"}[schedule]
    return {"param.method.name": method, "param.attack.schedule": schedule, "param.spec.t": t,
            "param.spec.epochs": epochs, "param.attack.gamma": gamma, "meta.schedule_row": row}


def test_table_3_rows_of_a_70_epoch_spec_name_the_papers_t():
    assert schedule_label(_run(42, 70)) == "Linear-60"
    assert schedule_label(_run(35, 70, schedule="curious", gamma=1.5)) == "Curious-(1.5,50)"
    assert schedule_label(_run(60, 100)) == "Linear-60"       # the paper's own length
    assert schedule_label(_run(45, 70)) == "Linear-45/70ep"   # no paper row: what it ran
    assert schedule_label(_run(35, 70, method="ssat-mbi-awr", schedule="curious", gamma=1.25)) == "Curious-(1.25,60)"

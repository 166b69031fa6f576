"""Small contracts of analysis/ that the larger table and plot tests pass over: Markdown escaping, column
groups, the supervised rows' labels, the protocol's required fields, the runs frame's first columns."""
import math

import pandas as pd

from analysis import collect, protocol, render, specs


def test_a_markdown_cell_escapes_the_pipe():
    assert render._md_row(["Lin.|✓", "89.20"]) == "| Lin.\\|✓ | 89.20 |"


def test_the_column_group_is_the_tag_then_dataset_and_model():
    tagged = {"meta.column_group": "cifar10/wrn-28-2", "param.dataset": "svhn", "param.model": "cnn-small"}
    assert specs.dataset_group(tagged) == "cifar10/wrn-28-2"
    assert specs.dataset_group({"param.dataset": "svhn", "param.model": "cnn-small"}) == "svhn/cnn-small"
    assert specs.dataset_of({"meta.column_group": "cifar100/wrn-28-2"}) == "cifar100"


def test_supervised_rows_are_named_by_schedule_and_interpolation():
    def run(interp, sched):
        return {"param.method": "trades", "param.interpolate": interp, "param.schedule": sched}
    assert specs.supervised_row(run(False, "const")) == "TRADES"
    assert specs.supervised_row(run(True, "curious")) == "TRADES+Ours"
    assert specs.supervised_row(run(False, "linear")) == "TRADES (Lin.|no-int)"
    assert specs.supervised_row(run(True, "const")) == "TRADES (none|int)"
    assert specs.supervised_row({"param.method": "ssat-mbi", "param.schedule": "const"}) is None


def test_a_pgd_cell_needs_the_norm_eps_step_and_restarts():
    proto = protocol.Protocol()
    want = protocol.expected_fields("pgd20", "cifar10", "best", proto)
    assert want == {"attack": "pgd20", "checkpoint": "best", "precision": "fp32", "eps": 8 / 255, "norm": "Linf",
                    "steps": 20, "step": 8 / 255 * 0.1, "restarts": 1}
    record = {**want, "subset": "full", "n": 10000}
    assert protocol.mismatch({**record, "norm": "L2"}, "pgd20", "cifar10", "best", proto) == \
        "protocol norm='L2', table needs 'Linf'"
    assert protocol._close(0.0, 1e-13) and not protocol._close(0.0, 1e-9) and protocol._close(1.0, 1.0 + 1e-7)
    assert not protocol._close("a", 1.0)


def test_the_runs_frame_leads_with_its_identifying_columns():
    empty = collect.runs_frame([])
    assert list(empty.columns) == ["run_id", "experiment", "source"] and empty.empty
    df = collect.runs_frame([{"zeta": 1, "parent_run_id": "p", "start_time": 5, "run_name": "n", "source": "mlflow",
                              "experiment": "e", "run_id": "r", "alpha": 2}])
    head = ["run_id", "experiment", "source", "run_name", "start_time", "parent_run_id"]
    assert list(df.columns[:6]) == head and list(df.columns[6:]) == sorted(df.columns[6:])
    assert {"alpha", "zeta"} <= set(df.columns[6:])
    assert isinstance(df.index, pd.RangeIndex) and math.isclose(df.loc[0, "start_time"], 5.0)


def test_a_run_without_a_kind_is_read_as_a_trial_and_other_kinds_are_not():
    from analysis.cells import Options, _reads
    from analysis.specs import get_spec
    spec, opts = get_spec("ablation"), Options()
    assert _reads({"meta.table": "ablation"}, spec, opts)
    assert _reads({"meta.table": "ablation", "meta.kind": "teacher"}, spec, opts)
    assert not _reads({"meta.table": "ablation", "meta.kind": "sweep"}, spec, opts)
    assert not _reads({"meta.table": "main"}, spec, opts)


def test_rows_found_only_in_runs_are_in_natural_order():
    from analysis.cells import layout
    from analysis.specs import get_spec
    sel = pd.DataFrame({"row": ["rho=0.2", "rho=0.05", "rho=0.1", "rho=0.05"],
                        "group": ["mnist5k/cnn-small"] * 4})
    _, blocks, _ = layout(get_spec("rho-sensitivity"), sel)
    assert blocks == [("rho=0.05", "rho=0.1", "rho=0.2")]


def test_a_seed_is_the_tag_else_the_param():
    from analysis.cells import _seed
    assert _seed({"meta.seed": 3, "param.seed": 1}) == 3 and _seed({"param.seed": 1}) == 1
    assert _seed({}) is None

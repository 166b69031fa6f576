"""Small contracts of analysis/ that the larger table and plot tests pass over: Markdown escaping, column
groups, the supervised rows' labels, the protocol's required fields, the runs frame's first columns."""
import math

import pandas as pd

from analysis import collect, markdown, protocol
from analysis import run_labels
from analysis import table_specs as specs


def test_a_markdown_cell_escapes_the_pipe_and_a_line_break():
    assert markdown.md_row(["Lin.|✓", "89.20"]) == "| Lin.\\|✓ | 89.20 |"
    assert markdown.md_row(["a|b|c", 3, "two\nlines"]) == "| a\\|b\\|c | 3 | two lines |"
    assert markdown.md_align([":-", "-:"]) == "|:-|-:|"


def test_the_column_group_is_the_tag_then_dataset_and_model():
    tagged = {"meta.column_group": "cifar10/wrn-28-2", "param.data.dataset": "svhn", "param.model.name": "cnn-small"}
    assert run_labels.dataset_group(tagged) == "cifar10/wrn-28-2"
    assert run_labels.dataset_group({"param.data.dataset": "svhn", "param.model.name": "cnn-small"}) == "svhn/cnn-small"
    assert run_labels.dataset_of({"meta.column_group": "cifar100/wrn-28-2"}) == "cifar100"


def test_supervised_rows_are_named_by_schedule_and_interpolation():
    def run(interp, sched, **tags):
        return {"param.method.name": "trades", "param.method.interpolate": interp, "param.attack.schedule": sched,
                **{f"meta.{k}": v for k, v in tags.items()}}
    assert specs.supervised_row(run(False, "const")) == "TRADES"
    assert specs.supervised_row(run(True, "curious")) == "TRADES+Ours"
    assert specs.supervised_row(run(False, "linear")) == "TRADES (Lin.|no-int)"
    assert specs.supervised_row(run(True, "const")) == "TRADES (none|int)"
    # the labels of a run that records them (ssat.method_label, ssat.schedule_label)
    assert specs.supervised_row(run(False, "linear", method_label="Trades", schedule_label="L")) == "Trades (L|no-int)"
    assert specs.supervised_row({"param.method.name": "ssat-mbi", "param.attack.schedule": "const"}) is None


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
    from analysis.table_specs import get_spec
    spec, opts = get_spec("ablation"), Options()
    assert _reads({"meta.table": "ablation"}, spec, opts)
    assert _reads({"meta.table": "ablation", "meta.kind": "teacher"}, spec, opts)
    assert not _reads({"meta.table": "ablation", "meta.kind": "sweep"}, spec, opts)
    assert not _reads({"meta.table": "main"}, spec, opts)


def test_rows_found_only_in_runs_are_in_natural_order():
    from analysis.cells import layout
    from analysis.table_specs import get_spec
    sel = pd.DataFrame({"row": ["rho=0.2", "rho=0.05", "rho=0.1", "rho=0.05"],
                        "group": ["mnist5k/cnn-small"] * 4})
    _, blocks, _ = layout(get_spec("rho-sensitivity"), sel)
    assert blocks == [("rho=0.05", "rho=0.1", "rho=0.2")]


def test_a_seed_is_the_tag_else_the_param():
    from analysis.cells import _seed
    assert _seed({"meta.seed": 3, "param.seed": 1}) == 3 and _seed({"param.seed": 1}) == 1
    assert _seed({}) is None


# ---- every Markdown table analysis writes keeps a name holding '|' in one cell ---------------------------------
def md_cells(line: str) -> list[str]:
    """A Markdown table row's cells as GitHub splits them: at every '|' not escaped as '\\|', unescaped."""
    import re
    return [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]


def md_tables(text: str) -> list[list[list[str]]]:
    """Every table of a Markdown text (its runs of lines starting with '|') as rows of cells, header first."""
    tables, current = [], []
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            current.append(md_cells(line))
        elif current:
            tables.append(current)
            current = []
    return tables


def assert_one_cell(text: str, name: str, tables: int) -> None:
    found = md_tables(text)
    assert len(found) == tables
    for table in found:
        assert {len(row) for row in table} == {len(table[0])}, table  # every row as wide as the header
    assert any(name in row for table in found for row in table), name


def test_a_name_with_a_pipe_is_one_cell_in_every_markdown_table():
    import json as json_
    from analysis.autoattack_breakdown import breakdown
    from analysis.autoattack_breakdown import render as aa_render
    from analysis.collect import history_frame, runs_frame
    from analysis.convergence import convergence_frame, to_markdown
    from analysis.tables import render_table

    # the AutoAttack breakdown: the run name and its row
    aa = pd.DataFrame({"run_name": ["curious|on-seed0"], "meta.row": ["curious|on"], "meta.seed": [0],
                       **{f"metric.test/best/autoattack/{a}": [v] for a, v in
                          zip(("apgd-ce", "apgd-t", "fab-t", "square"), (60.0, 55.0, 55.0, 50.0))}})
    text = aa_render(breakdown(aa))
    assert_one_cell(text, "curious|on-seed0", 1)
    assert md_tables(text)[0][2] == ["curious|on-seed0", "curious|on", "0", "60.00", "55.00", "55.00", "50.00",
                                     "5.00 (masking?)"]
    # the convergence report: the row, in both its tables
    runs = pd.DataFrame([{"run_id": "a", "meta.kind": "trial", "meta.row": "curious|on", "param.seed": 0}])
    hist = history_frame([{"run_id": "a", "key": k, "step": s, "value": v} for k in ("train/loss", "val/clean",
                          "val/pgd10") for s, v in ((1, 2.0), (2, 1.0))])
    text = to_markdown(convergence_frame(runs, hist))
    assert_one_cell(text, "curious|on", 2)
    # a paper table: a method whose label holds '|' (its ssat.method_label)
    proto = json_.dumps({"attack": "clean", "checkpoint": "best", "precision": "fp32", "subset": "full", "n": 10000})
    rec = {"run_id": "r", "meta.kind": "trial", "meta.table": "main", "meta.status": "FINISHED", "meta.seed": "0",
           "meta.expected_seeds": "1",
           "meta.method_label": "A|B", "param.method.name": "a-b", "param.data.dataset": "cifar10",
           "param.model.name": "wrn-28-5", "metric.test/best/clean": 80.0, "protocol.best/clean": proto}
    text = render_table(runs_frame([rec]), "main", "md")
    assert_one_cell(text, "A|B", 1)
    assert ["A|B", "**80.00**"] in md_tables(text)[0]

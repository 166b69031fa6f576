"""A sweep's state file (sweeps/driver/state.py): sweep.json as written and read back, a state written by another
version, the spec rebuilt from it, and what a missing sweep is told."""
from __future__ import annotations

import json

import pytest

from sweeps.driver.run_options import RunArgs
from sweeps.driver.state import SweepState, missing_sweep
from sweeps.errors import SpecError, SweepError
from sweeps.paths import Paths

SOURCE = {"name": "s", "preset": "mnist5k-ssat-mbi", "epochs": 4, "grid": [{"row": "a", "set": {}}]}


def _state(source=SOURCE, **kw) -> SweepState:
    return SweepState(name="s", spec_path="specs/s.yaml", source=source, tracking_uri="sqlite:///m.db",
                      args=RunArgs(epochs=8, seeds=[0, 1]), **kw)


def test_sweep_json_is_written_one_key_a_line_and_read_back_the_same(tmp_path):
    paths = Paths(tmp_path, "s")
    paths.sweep_dir.mkdir(parents=True)
    state = _state(phases={"grid": "done"}, status="done", driver_pid=7)
    state.save(paths)
    text = paths.state.read_text()
    assert text.startswith('{\n "name": "s",\n "spec_path": "specs/s.yaml",\n "source": {\n  "name": "s",\n')
    assert '\n "args": {\n  "epochs": 8,\n  "seeds": [\n   0,\n   1\n  ],\n' in text
    assert json.loads(text)["phases"] == {"grid": "done"}
    assert SweepState.load(paths) == state


def test_a_state_of_another_version_loads_what_it_knows(tmp_path):
    """Written before `args` existed, or by a version with options and fields this one does not know."""
    paths = Paths(tmp_path, "s")
    paths.sweep_dir.mkdir(parents=True)
    old = {"name": "s", "spec_path": "specs/s.yaml", "source": SOURCE, "tracking_uri": "sqlite:///m.db",
           "phases": {"grid": "running"}, "status": "incomplete"}
    paths.state.write_text(json.dumps(old))
    assert SweepState.load(paths) == SweepState(**old, args=RunArgs())
    paths.state.write_text(json.dumps({**old, "args": {"epochs": 3, "from_the_future": 1}, "later_field": 2}))
    assert SweepState.load(paths).args == RunArgs(epochs=3)


def test_the_spec_is_rebuilt_with_the_runs_options_and_named_by_its_file():
    spec = _state().spec()
    assert spec.seeds == [0, 1] and spec.rescale == 8  # the run's --seeds 0 1 --epochs 8
    with pytest.raises(SpecError) as err:
        _state(source={**SOURCE, "epochs": "four"}).spec()
    assert str(err.value).startswith("specs/s.yaml: ")


def _sweeps(workdir, names):
    for n in names:
        (workdir / "runs" / "sweeps" / n).mkdir(parents=True)
        (workdir / "runs" / "sweeps" / n / "sweep.json").write_text("{}")


def test_a_missing_sweep_is_told_the_three_nearest_names_and_the_list(tmp_path):
    root = tmp_path / "runs" / "sweeps"
    assert missing_sweep(Paths(tmp_path, "tabel2")) == (
        f"no sweep named 'tabel2' in {root}; it has none (`python -m sweeps run SPEC` starts one)")
    _sweeps(tmp_path, ["table1", "table2", "table3", "table4", "zzz"])
    assert missing_sweep(Paths(tmp_path, "tabel2")) == (
        f"no sweep named 'tabel2' in {root}; nearest: table2, table4, table3; all: table1, table2, table3, table4, zzz")
    with pytest.raises(SweepError, match="no sweep named 'tabel2'"):
        SweepState.load(Paths(tmp_path, "tabel2"))


@pytest.mark.parametrize("count, more", [(20, ""), (21, " and 1 more")])
def test_the_list_shows_twenty_names_then_how_many_more(tmp_path, count, more):
    names = [f"sweep{i:02d}" for i in range(count)]
    _sweeps(tmp_path, names)
    said = missing_sweep(Paths(tmp_path, "other"))
    assert said.endswith(f"; all: {', '.join(names[:20])}{more}")

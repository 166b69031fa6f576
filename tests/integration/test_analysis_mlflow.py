"""analysis/ end to end: runs logged per docs/tracking.md to a real `mlflow server` on 127.0.0.1, read back
into tables (md, latex, csv), compared with cells computed here from the known values; the same table from
a Ray-results-style folder; the CLIs; a plot from the MLflow per-epoch history.
"""
import hashlib
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pandas as pd
import pytest
from matplotlib.image import imread
from scipy import stats

from analysis.collect import load_history, load_ray_runs, load_runs
from analysis.plots import DPI, FIGURES, build_figure, plot_figure
from analysis.tables import build_table, provenance, render_table, write_table

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]

# ---- the known values ----------------------------------------------------------------------
# MNIST-5k ablation as in the demo: (schedule, t, interpolate) -> per seed (clean, pgd20, autoattack on first200)
ABLATION = {
    ("const", None, False): [(97.1, 88.0, 85.0), (97.4, 88.6, 86.0), (96.9, 87.5, 85.5)],
    ("linear", 6, False): [(97.3, 89.1, 86.5), (97.0, 88.9, 86.0)],                  # one seed missing
    ("curious", 7, False): [(96.8, 90.2, 87.0), (97.0, 90.6, 87.5), (97.2, 90.4, 87.0)],
    ("const", None, True): [(97.5, 89.0, 86.0), (97.6, 88.2, 86.5), (97.4, 88.7, 86.0)],
    ("linear", 6, True): [(97.9, 90.0, 87.0), (98.1, 89.5, 87.5), (98.0, 89.9, 87.0)],
    ("curious", 7, True): [(97.7, 91.5, 88.5), (97.8, 91.2, 88.0), (97.6, 91.9, 88.0)],
}
ROW = {"const": "none", "linear": "Lin.", "curious": "Cur."}
MNIST_EPS = 0.3
C10_EPS = 8 / 255
ATTACKS = ("clean", "pgd20", "autoattack")


def protocol(attack, eps, n, subset="full", precision="fp32"):
    rec = {"attack": attack, "eps": eps, "norm": "Linf", "step": eps / 10, "steps": None, "restarts": 1,
           "random_start": "uniform", "loss": "ce", "n": n, "subset": subset, "precision": precision,
           "checkpoint": "best", "autoattack": None}
    if attack.startswith("pgd"):
        rec["steps"] = int(attack[3:])
    if attack == "autoattack":
        rec["autoattack"] = {"version": "standard", "attacks": ["apgd-ce", "apgd-t", "fab-t", "square"],
                             "package": "pyautoattack 0.2.0"}
    return json.dumps(rec, separators=(",", ":"))


def trial(sweep, table, seed, params, finals, protocols, epochs=10, expected=3, kind="trial", ckpt="best"):
    """One run as the contract describes it: meta (tags), flat params, per-epoch history, final metrics."""
    cfg = hashlib.sha256(json.dumps(params, sort_keys=True).encode()).hexdigest()[:12]
    meta = {"kind": kind, "sweep": sweep, "stage": "demo", "table": table, "seed": seed,
            "expected_seeds": expected, "config_hash": cfg, "status": "FINISHED"}
    history = [{"val/clean": 50.0 + 10 * e + seed, "val/pgd10": 30.0 + 5 * e, "sched/eps_max": 0.1 * e,
                "sched/rho": 0.05, "sched/lr": 0.1 / e, "adv/alpha_mean": 0.3 + 0.1 * e,
                "adv/alpha_min_share": 0.1, "adv/alpha_one_share": 0.1 * e} for e in range(1, epochs + 1)]
    return {"meta": meta, "params": {**params, "seed": seed, "epochs": epochs},
            "history": history, "finals": {f"test/{ckpt}/{a}": v for a, v in finals.items()},
            "protocols": {f"protocol/{ckpt}/{a}": p for a, p in protocols.items()}}


def mnist_params(schedule, t, interp):
    return {"method": "ssat-mbi", "schedule": schedule, "t": t, "gamma": 1.25, "eps": MNIST_EPS, "rho0": 0.05,
            "rho_double_epoch": None, "beta": 0.4, "tau": 2.0, "K": 3, "lambda": 8.0, "interpolate": interp,
            "split_seed": 0, "dataset": "mnist5k", "model": "cnn-small", "precision": "fp32"}


def ablation_trials():
    out = []
    for (schedule, t, interp), seeds in ABLATION.items():
        for seed, values in enumerate(seeds):
            protos = {a: protocol(a, MNIST_EPS, 1000) for a in ATTACKS[:2]}
            protos["autoattack"] = protocol("autoattack", MNIST_EPS, 200, subset="first200")
            out.append(trial("abl-demo", "ablation", seed, mnist_params(schedule, t, interp),
                             dict(zip(ATTACKS, values)), protos))
    # another protocol (evaluated in bf16): must be left out of every cell of its row
    odd = {a: protocol(a, MNIST_EPS, 1000, precision="bf16") for a in ATTACKS}
    out.append(trial("abl-demo", "ablation", 3, mnist_params("const", None, False),
                     dict(zip(ATTACKS, (10.0, 10.0, 10.0))), odd))
    return out


MAIN = {"ssat-mbi": [(83.4, 64.6), (83.1, 64.4), (83.5, 64.7)],
        "rst": [(82.7, 63.8), (82.5, 63.6), (82.8, 63.7)],
        "uat++": [(84.6, 63.1), (84.3, 63.3), (84.5, 62.9)]}


def c10_params(method):
    return {"method": method, "schedule": "curious" if method == "ssat-mbi" else "const", "t": 70,
            "gamma": 1.25, "eps": C10_EPS, "rho0": 0.05, "rho_double_epoch": 75, "beta": 0.4, "tau": 2.0,
            "K": 3, "lambda": 8.0, "interpolate": method == "ssat-mbi", "split_seed": 0, "dataset": "cifar10",
            "model": "wrn-28-5", "precision": "fp32"}


def main_trials(methods, sweep):
    return [trial(sweep, "main", seed, c10_params(m), {"clean": v[0], "pgd10": v[1]},
                  {a: protocol(a, C10_EPS, 10000) for a in ("clean", "pgd10")})
            for m in methods for seed, v in enumerate(MAIN[m])]


# since issue 27: the config's dotted parameter names, and the labels of the method and schedule as tags
NEW_NAMES = {"method": "method.name", "schedule": "attack.schedule", "t": "attack.t", "gamma": "attack.gamma",
             "eps": "attack.eps", "rho0": "method.rho0", "rho_double_epoch": "method.rho_double_epoch",
             "beta": "method.beta", "tau": "method.tau", "K": "method.K", "lambda": "method.lam",
             "interpolate": "method.interpolate", "split_seed": "data.split_seed", "dataset": "data.dataset",
             "model": "model.name", "precision": "system.precision", "epochs": "optim.epochs"}
LABELS = {"const": ("none", "Const", "Const"), "linear": ("Lin.", "Linear", "Linear-{t}"),
          "curious": ("Cur.", "Curious", "Curious-({gamma},{t})")}


def logged_now(t, spec_epochs=100):
    """A trial as today's code logs it: its key and labels among the tags, the dotted parameter names, and the spec's
    run before --epochs rescaled it (here a 100-epoch paper spec run for 10 epochs: t 6 and 7 were the paper's 60 and
    70)."""
    p, m = t["params"], t["meta"]
    spec_t = None if p["t"] is None else p["t"] * spec_epochs // p["epochs"]
    label, title, row = LABELS[p["schedule"]]
    meta = {**m, "key": f"{m['sweep']}-{m['config_hash']}-s{m['seed']}-{m['stage']}", "method_label": "SSAT-MBI",
            "schedule_label": label, "schedule_title": title, "schedule_row": row}
    return {**t, "meta": meta, "params": {**{NEW_NAMES.get(k, k): v for k, v in p.items()}, "spec.epochs": spec_epochs,
                                          "spec.t": spec_t}}


def teacher_run():
    t = trial("main-c10", "main", 0, {"dataset": "cifar10"}, {"clean": 95.1, "pgd10": 0.02},
              {a: protocol(a, C10_EPS, 10000).replace('"best"', '"teacher"') for a in ("clean", "pgd10")},
              kind="teacher", expected=1, ckpt="teacher")
    t["meta"].update(row="FixMatch", dataset="cifar10", column_group="cifar10/wrn-28-5")
    return t


# ---- the server ----------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_until_up(url: str, proc, timeout: float = 90.0) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"mlflow server exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.3)
    raise RuntimeError("mlflow server did not answer in time")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("mlflow")
    port = _free_port()
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    log = open(tmp / "server.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "mlflow", "server", "--backend-store-uri",
                             f"sqlite:///{tmp}/db", "--artifacts-destination", str(tmp / "art"),
                             "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
                            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    uri = f"http://127.0.0.1:{port}"
    try:
        _wait_until_up(uri, proc)
        yield uri
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the session this fixture started, nothing else
            proc.wait()
        log.close()


def log_sweep(client, name, trials):
    """A sweep experiment: the parent run, then one nested child (or teacher) run per trial."""
    from mlflow.entities import Metric, Param

    exp = client.create_experiment(name)
    parent = client.create_run(exp, tags={"ssat.kind": "sweep", "ssat.sweep": name}, run_name=name)
    client.set_terminated(parent.info.run_id)
    now = int(time.time() * 1000)
    for t in trials:
        tags = {f"ssat.{k}": str(v) for k, v in t["meta"].items()}
        tags["mlflow.parentRunId"] = parent.info.run_id
        tags.update(t["protocols"])
        run = client.create_run(exp, tags=tags).info.run_id
        metrics = [Metric(k, v, now, e) for e, line in enumerate(t["history"], 1) for k, v in line.items()]
        last = len(t["history"])
        metrics += [Metric(k, v, now, last) for k, v in t["finals"].items()]
        params = [Param(k, str(v)) for k, v in t["params"].items()]
        client.log_batch(run, metrics=metrics, params=params)
        client.set_terminated(run)


def write_ray_folder(root: Path, trials) -> Path:
    """The same trials as a Ray Tune results folder: params.json (the trainable's config, not read) and
    result.json, every line with the run record the trainable reports (``run_json``)."""
    for i, t in enumerate(trials):
        d = root / f"trainable_{i:05d}_{i}"
        d.mkdir(parents=True)
        (d / "params.json").write_text(json.dumps({"trial": {"meta": {"sweep": t["meta"]["sweep"]}, "cfg": {}}}))
        run = json.dumps({"key": t["meta"]["key"], "tags": {f"ssat.{k}": v for k, v in t["meta"].items()
                                                            if k != "status"},
                          "params": t["params"], "name": t["meta"]["key"]})
        lines = [{**h, "epoch": e, "training_iteration": e, "repro_json": "{}", "run_json": run}
                 for e, h in enumerate(t["history"], 1)]
        lines[-1].update(t["finals"], **t["protocols"], done=True)
        (d / "result.json").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return root


@pytest.fixture(scope="module")
def logged(server):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=server)
    log_sweep(client, "abl-demo", ablation_trials())  # as the code before the run record logged it
    log_sweep(client, "abl-demo-now", [logged_now(t) for t in ablation_trials()])
    log_sweep(client, "main-c10", main_trials(["ssat-mbi"], "main-c10") + [teacher_run()])
    log_sweep(client, "base-c10", main_trials(["rst", "uat++"], "base-c10"))
    return server


# ---- expectations computed here --------------------------------------------------------------
def expected_cells():
    """(row, column) -> dict(mean, std, n, values) from ABLATION, with statistics (ddof=1)."""
    out = {}
    for (schedule, _, interp), seeds in ABLATION.items():
        row = f"{ROW[schedule]}|{'int' if interp else 'no-int'}"
        for j, attack in enumerate(ATTACKS):
            vals = [s[j] for s in seeds]
            out[(row, attack)] = {"mean": statistics.mean(vals), "std": statistics.stdev(vals), "n": len(vals),
                                  "values": vals}
    return out


def fmt(c, bold=False):
    mean = f"{c['mean']:.2f}"
    return (f"**{mean}**" if bold else mean) + f" ({c['std']:.2f})"


# ---- tests ---------------------------------------------------------------------------------
def test_ablation_cells_in_every_format(logged):
    runs = load_runs(["abl-demo"], tracking_uri=logged)
    assert (runs["meta.kind"] == "sweep").sum() == 1 and len(runs) == 1 + 17 + 1
    exp = expected_cells()
    csv = pd.read_csv(pd.io.common.StringIO(render_table(runs, "ablation", "csv")))
    assert set(csv["column"]) == {"clean", "pgd20"}  # AutoAttack on first200 only: left out
    best = {col: max(v["mean"] for (r, c), v in exp.items() if c == col) for col in ("clean", "pgd20")}
    base = {col: exp[("none|no-int", col)]["values"] for col in ("clean", "pgd20")}
    for line in csv.itertuples():
        e = exp[(line.row, line.column)]
        assert line.n == e["n"]
        assert line.mean == pytest.approx(e["mean"], rel=1e-12, abs=1e-9)
        assert line.std == pytest.approx(e["std"], rel=1e-9)
        assert (line.emphasis == "bold") == (round(e["mean"], 2) == round(best[line.column], 2))
        assert bool(line.missing_seeds) == (e["n"] < 3)
        if line.row != "none|no-int":
            p = stats.ttest_ind(e["values"], base[line.column], equal_var=False).pvalue
            assert line.p_value == pytest.approx(p) and bool(line.not_significant) == (p >= 0.05)
    md = render_table(runs, "ablation", "md")
    lin = exp[("Lin.|no-int", "clean")]
    assert f"| Lin. | ✗ | {fmt(lin)}†" in md
    cur = exp[("Cur.|int", "pgd20")]
    assert f"{fmt(cur, bold=True)} |" in md
    latex = render_table(runs, "ablation", "latex")
    assert rf"\textbf{{{cur['mean']:.2f}}} ({cur['std']:.2f})" in latex
    assert r"\multicolumn{4}{c}{MNIST-5k (cnn-small)}" in latex
    assert "Glo. in these runs: Cur. = Curious-(1.25,70), Lin. = Linear-60 (paper" in md
    assert "AutoAttack left out" in md


def test_a_run_with_another_protocol_is_left_out(logged):
    runs = load_runs(["abl-demo"], tracking_uri=logged)
    prov = json.loads(json.dumps(provenance(build_table(runs, "ablation"))))
    cell = [c for c in prov["cells"] if c["row"] == "none|no-int" and c["column"] == "clean"][0]
    assert cell["values"] == [97.1, 97.4, 96.9] and cell["seeds"] == [0, 1, 2]
    odd = runs.loc[runs["metric.test/best/clean"] == 10.0, "run_id"].item()
    reasons = [e["reason"] for e in prov["excluded"] if e["run_id"] == odd]
    assert len(reasons) == 3 and all("precision='bf16'" in r for r in reasons)
    assert odd not in prov["run_ids"]


def test_subset_admitted_and_labelled(logged):
    runs = load_runs(["abl-demo"], tracking_uri=logged)
    md = render_table(runs, "ablation", "md", allow_subset=True)
    exp = expected_cells()
    aa, base = exp[("Cur.|int", "autoattack")], exp[("none|no-int", "autoattack")]
    best = max(v["mean"] for (r, c), v in exp.items() if c == "autoattack")
    p = stats.ttest_ind(aa["values"], base["values"], equal_var=False).pvalue
    text = fmt(aa, bold=round(aa["mean"], 2) == round(best, 2)) + ("‡" if p >= 0.05 else "") + "§"
    assert f"| Cur. | ✓ | {fmt(exp[('Cur.|int', 'clean')])}" in md and f"| {text} |" in md
    assert "test subset (first200)" in md


def test_baselines_from_other_experiments(logged):
    runs = load_runs(["main-c10", "base-c10"], tracking_uri=logged)
    md = render_table(runs, "main", "md")
    c = {m: (statistics.mean(v[0] for v in s), statistics.stdev(v[0] for v in s)) for m, s in MAIN.items()}
    assert f"| UAT++ | **{c['uat++'][0]:.2f}** ({c['uat++'][1]:.2f})" in md
    assert f"| RST | {c['rst'][0]:.2f} ({c['rst'][1]:.2f}) |" in md
    assert "| FixMatch | 95.10 | 0.02 |" in md  # the teacher, single run, never ranked
    assert "| SRST-AWR | — | — |" in md
    assert "PGD-20 left out" in md and "AutoAttack left out" in md
    pgd = {m: [v[1] for v in s] for m, s in MAIN.items()}
    p = stats.ttest_ind(pgd["ssat-mbi"], pgd["rst"], equal_var=False).pvalue
    mark = "" if p < 0.05 else "‡"
    assert f"**{statistics.mean(pgd['ssat-mbi']):.2f}** ({statistics.stdev(pgd['ssat-mbi']):.2f}){mark} |" in md


def test_a_store_written_before_the_run_record_tabulates_as_one_written_now(logged):
    """Runs without spec.* get them inferred (analysis.collect.legacy_spec_params), their parameters read under
    today's names and their labels from the frozen legacy map: the same tables, byte for byte, as the runs that log
    spec.*, the dotted names and the label tags."""
    before = load_runs(["abl-demo"], tracking_uri=logged)
    now = load_runs(["abl-demo-now"], tracking_uri=logged)
    def spec(runs):  # without a t (Const) there is nothing to infer a length from: the run's own is taken
        trials = runs[(runs["meta.kind"] == "trial") & runs["param.attack.t"].notna()]
        return {(r["meta.config_hash"], r["meta.seed"]): (int(r["param.spec.epochs"]), int(r["param.spec.t"]))
                for _, r in trials.iterrows()}
    assert spec(before) == spec(now) and len(spec(now)) == 11 and set(spec(now).values()) == {(100, 60), (100, 70)}
    for fmt_ in ("md", "latex", "csv"):
        for opts in ({}, {"allow_subset": True, "compare_paper": True}):
            assert render_table(now, "ablation", fmt_, **opts) == render_table(before, "ablation", fmt_, **opts)


def test_ray_results_folder_gives_the_same_table(logged, tmp_path):
    from_mlflow = load_runs(["abl-demo"], tracking_uri=logged)
    folder = write_ray_folder(tmp_path / "abl-demo", [logged_now(t) for t in ablation_trials()])
    from_ray = load_ray_runs(folder)
    for fmt_ in ("md", "latex", "csv"):
        for opts in ({}, {"allow_subset": True, "compare_paper": True}):
            assert (render_table(from_ray, "ablation", fmt_, **opts)
                    == render_table(from_mlflow, "ablation", fmt_, **opts))


def test_write_table_files(logged, tmp_path):
    runs = load_runs(["abl-demo"], tracking_uri=logged)
    paths = write_table(runs, "ablation", tmp_path / "tables")
    assert sorted(paths) == ["csv", "latex", "md", "provenance"]
    assert all(p.is_file() and p.stat().st_size > 0 for p in paths.values())
    prov = json.loads(paths["provenance"].read_text())
    assert prov["table"] == "ablation" and prov["options"]["checkpoint"] == "best" and len(prov["run_ids"]) == 17


def _cli(module, *args, uri):
    env = {**os.environ, "MLFLOW_TRACKING_URI": uri}
    return subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=60)


def test_tables_cli(logged, tmp_path):
    out = tmp_path / "t2.tex"
    r = _cli("analysis.tables", "--experiment", "abl-demo", "--table", "ablation", "--format", "latex",
             "--out", str(out), "--compare-paper", uri=logged)
    assert r.returncode == 0, r.stderr
    assert out.read_text() == render_table(load_runs(["abl-demo"], tracking_uri=logged), "ablation", "latex",
                                           compare_paper=True)
    prov = json.loads((tmp_path / "t2.provenance.json").read_text())
    assert prov["command"][:3] == ["python", "-m", "analysis.tables"] and prov["options"]["compare_paper"]
    bad = _cli("analysis.tables", "--experiment", "no-such-sweep", "--table", "ablation", uri=logged)
    assert bad.returncode == 2 and "'no-such-sweep' does not exist" in bad.stderr and "abl-demo" in bad.stderr
    bad = _cli("analysis.tables", "--experiment", "abl-demo", "--table", "table2", uri=logged)
    assert bad.returncode == 2 and "invalid choice: 'table2' (choose from 'main', 'ablation'" in bad.stderr


def test_export_cli_parquet(logged, tmp_path):
    r = _cli("analysis.export", "--experiment", "abl-demo", "--format", "parquet", "--out", str(tmp_path), uri=logged)
    assert r.returncode == 0, r.stderr
    runs = pd.read_parquet(tmp_path / "abl-demo.runs.parquet")
    hist = pd.read_parquet(tmp_path / "abl-demo.history.parquet")
    assert len(runs) == 18  # the trials, not the sweep's parent run
    assert pd.api.types.is_float_dtype(runs["param.attack.eps"]) and pd.api.types.is_integer_dtype(runs["param.seed"])
    assert pd.api.types.is_bool_dtype(runs["param.method.interpolate"])
    assert pd.api.types.is_float_dtype(runs["metric.test/best/clean"])
    assert "param.eps" not in runs and "param.interpolate" not in runs  # a store of before issue 27, today's names
    assert len(hist) == 18 * 10 * 8 and set(hist["step"]) == set(range(1, 11))


def test_curves_plot_from_mlflow_history(logged, tmp_path):
    runs = load_runs(["abl-demo"], tracking_uri=logged)
    hist = load_history(runs, tracking_uri=logged)
    one = hist[(hist["key"] == "sched/lr")].groupby("run_id").size()
    assert (one == 10).all() and len(one) == 18
    fig = build_figure(runs, hist, "curves")
    assert len(fig.axes[0].get_lines()) == 2 * 6  # 6 configurations (the bf16 run shares one), clean + pgd10
    path = plot_figure(runs, hist, "curves", tmp_path / "curves.png")
    h, w = imread(path).shape[:2]
    assert (w, h) == (FIGURES["curves"].size[0] * DPI, FIGURES["curves"].size[1] * DPI)

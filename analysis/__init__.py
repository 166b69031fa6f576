"""Ablation and sensitivity tables, figures and exports from tracked SSAT-MBI sweeps.

Reads runs through the MLflow client, or a Ray Tune results folder when no store is at hand, into pandas
(`analysis.collect`; the run contract is docs/tracking.md). Needs pandas, the MLflow client, matplotlib
and scipy; never torch or Ray.

Command lines:
    python -m analysis.export --experiment NAME [--format csv|parquet] [--out DIR]
    python -m analysis.tables --experiment NAME [--experiment OTHER ...] --table T
                              [--format md|latex|csv] [--out FILE] [--compare-paper] [--allow-subset]
        T: main, ablation, schedules, awr-ablation, supervised, beta-sensitivity, rho-sensitivity,
           training-time, search (a search's confirmed configurations, ranked: --metric, --mode)
    python -m analysis.plots  --experiment NAME --figure F [--out FILE.png]
        F: a key of analysis.plots.FIGURES (beta, rho, pareto, curves, alpha, ablation; --help says what each shows)
    python -m analysis.autoattack_breakdown --experiment NAME [--checkpoint best|last]   AutoAttack attack by attack
    python -m analysis.importance --experiment NAME [--epoch E] [--metric KEY] [--out DIR]   which settings matter
    python -m analysis.search_figures --experiment NAME --out DIR   a search's study: importances, curves, slices
    python -m analysis.convergence --experiment NAME [--stage S ...] [--out FILE.md]   did each row converge
Each takes --tracking-uri URI; export, tables, plots and autoattack also --ray-results DIR (instead of or beside
--experiment).

From Python: `analysis.collect.load_runs` / `load_history`, `analysis.tables.render_table(df_runs, table,
fmt)`, `analysis.tables.write_table(df_runs, table, folder)`, `analysis.plots.plot_figure(df_runs,
df_hist, figure, out_png)`, `analysis.paper_report.write_report(parts, out_dir, ...)` (the paper in miniature,
with `analysis.claims`' verdicts). Modules: collect, run_labels, protocol, table_specs, cells, render, markdown,
tables, plots, export, paper, claims, paper_report, autoattack_breakdown, importance, search_figures, convergence.

Every command reads an existing store: without --tracking-uri (and $MLFLOW_TRACKING_URI) that is MLflow's default
./mlflow.db, and where it does not exist the command says so and creates nothing (`collect.resolve_tracking_uri`).
"""

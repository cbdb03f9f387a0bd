"""moerl's analysis package: reads run results (HDF5, docs/hdf5-schema.md) and sweep directories,
and writes reports — an interactive offline dashboard, and for papers (--static) curves with 95%
bands over seeds, expert-load heatmaps, IS-ratio histograms — with a summary table (Markdown, CSV).

    moerl report results/my-sweep                         # → results/my-sweep/report/index.html
    python3 -m analysis results/run.h5 --group-by algorithm

In a notebook (pip install -e . from the checkout, docs/sweeps.md "Notebooks"):

    from analysis import load_runs, run_summary
    df = load_runs("results/my-sweep")                    # pandas, one row per (run, step)

Modules: runs (loading, scenario keys, grouping; a run's identity, variant_of and seed_of, and its
outcomes, final_reward, final_eval, base_eval), stats (t and Wilson intervals, smoothing), summary
(the table), frame (DataFrames), dashboard (the interactive page), plots (the static pictures), report
(all of it together). Needs numpy, scipy, h5py, matplotlib; pandas for frame.
"""


def __getattr__(name):  # load_runs, run_summary without importing pandas for every report
    if name in ("load_runs", "run_summary", "SUMMARY_DOC"):
        from . import frame
        return getattr(frame, name)
    raise AttributeError(f"module 'analysis' has no attribute {name!r}")


__all__ = ["load_runs", "run_summary", "SUMMARY_DOC"]

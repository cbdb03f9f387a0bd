"""moerl's analysis package: reads run results (HDF5, docs/hdf5-schema.md) and sweep directories,
and writes reports — curves with 95% bands over seeds, expert-load heatmaps, IS-ratio histograms,
a summary table (Markdown, CSV) and a static HTML page.

    python3 -m analysis results/my-sweep                 # → results/my-sweep/report/index.html
    python3 -m analysis results/run.h5 --group-by algorithm

Modules: runs (loading, scenario keys, grouping), stats (intervals, smoothing), summary (the
table), plots (the pictures), report (all of it together). Needs numpy, h5py, matplotlib.
"""

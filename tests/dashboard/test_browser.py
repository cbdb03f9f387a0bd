"""The dashboard in a real browser (ctest: dashboard_browser): headless Chromium opens the report's
index.html from file:// and the test fails on any JavaScript error or failed load. It checks that
every chart drew the series the data call for (one mean per group, its band, one line per shown
run) and drew pixels, and that the metric picker, the seed toggle, the group toggle, the log
switch, the run filter, zoom and hover change what is drawn; the run table sorts and shows a
run's scenario diff; the expert-load heatmap and the tables are there.

Reports checked: a real tiny sweep made with the moerl binary (tests/sweep/tiny-grid.ini), and two
synthetic sources side by side (3 variants × 3 seeds × 60 steps, and 2 seeds × 3000 steps,
decimated).

Usage: python3 tests/dashboard/test_browser.py MOERL_BINARY [--screenshot PNG] [--keep DIR]
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)

from cdp import Browser  # noqa: E402
from analysis.runs import _is_number_or_bool  # noqa: E402

RENDERED = ("document.querySelectorAll('.panel').length > 0 && "
            "[...document.querySelectorAll('.panel')].every(p => p.dataset.rendered === '1')")
PANELS = "[...document.querySelectorAll('.panel')].map(p => Object.assign({}, p.dataset))"
# a hash of what the first chart's canvas shows, and how many of its pixels are not background
CANVAS = """(() => { const c = document.querySelectorAll('.panel canvas')[%d]; const d = c.getContext('2d')
  .getImageData(0, 0, c.width, c.height).data; let h = 0, ink = 0;
  for (let i = 0; i < d.length; i += 4) { if (d[i + 3] > 0) ink++; h = (h * 31 + d[i] + 7 * d[i + 1] + 13 * d[i + 2] + d[i + 3]) | 0; }
  return [h, ink]; })()"""


def read_js(path, prefix):
    text = open(path).read().strip()
    assert text.startswith(prefix), path
    return text[len(prefix):].rstrip(";").rstrip(")")


def report_data(out):
    d = json.loads(read_js(os.path.join(out, "data", "index.js"), "window.MOERL = "))
    values = {}
    for m in d["metrics"]:
        body = read_js(os.path.join(out, "data", "m", m["file"]), "MOERL_METRIC(")
        name, arr = body.split(",", 1)
        values[json.loads(name)] = json.loads(arr)
    return d, values


def groups_of(d, keys):
    """The page's grouping rule (dashboard.js groupLabel), here in Python: label → run indices."""
    runs = [i for i, r in enumerate(d["runs"]) if r["has_metrics"]]

    def value(r, k):
        return r["source"] if k == "source" else r["seed"] if k == "run.seed" else r["keys"].get(k, "")

    numeric = _is_number_or_bool  # the labelling rule the report's Python side uses too
    out = {}
    for i in runs:
        r = d["runs"][i]
        if not keys:
            lab = r["id"] if len(runs) == 1 else "all runs"
        else:
            vals = [value(r, k) for k in keys]
            lab = vals[0] if len(keys) == 1 and not numeric(vals[0]) else ", ".join(
                f"{k.split('.')[-1]}={v}" for k, v in zip(keys, vals))
        out.setdefault(lab, []).append(i)
    return out


def expected_series(d, values, metric, show_runs, bands=True, hidden=lambda i: False, keys=None):
    """(series, groups, run lines) the page must draw for a metric."""
    series = groups = lines = 0
    for lab, idx in groups_of(d, d["group_keys"] if keys is None else keys).items():
        rs = [i for i in idx if values[metric][i] is not None and not hidden(i)]
        if not rs:
            continue
        groups += 1
        series += 1 + (2 if bands and len(rs) > 1 else 0) + (len(rs) if show_runs else 0)
        lines += len(rs) if show_runs else 0
    return series, groups, lines


class Page:
    def __init__(self, browser, out):
        self.b, self.out = browser, out
        self.d, self.values = report_data(out)
        browser.open("file://" + os.path.join(out, "index.html"))
        self.settle()

    def settle(self):
        self.b.wait_for(RENDERED, what="every chart to render")
        self.b.pump(0.2)
        self.no_errors()

    def no_errors(self):
        assert not self.b.errors, "JavaScript errors:\n" + "\n".join(self.b.errors)

    def panels(self):
        return self.b.eval(PANELS)

    def click(self, selector, index=0):
        self.b.eval(f"document.querySelectorAll({json.dumps(selector)})[{index}].click()")
        self.settle()

    def canvas(self, k=0):
        return tuple(self.b.eval(CANVAS % k))


def check_panels(page, show_runs, hidden=lambda i: False, keys=None):
    ps = page.panels()
    assert ps, "no chart"
    for k, p in enumerate(ps):
        want = expected_series(page.d, page.values, p["metric"], show_runs, hidden=hidden, keys=keys)
        got = (int(p["series"]), int(p["groups"]), int(p["runLines"]))
        assert got == want, f"chart {k} ({p['metric']}): drew (series, groups, run lines) {got}, the data call for {want}"
        h, ink = page.canvas(k)
        assert ink > 1000, f"chart {k} ({p['metric']}): nothing drawn ({ink} pixels)"
    return ps


def check_report(browser, out, label):
    page = Page(browser, out)
    d = page.d
    show = page.b.eval("document.getElementById('show-runs').checked")
    assert show == (sum(r["has_metrics"] for r in d["runs"]) <= 40)
    ps = check_panels(page, show)
    assert [p["metric"] for p in ps] == [x["metric"] for x in d["defaults"]], "the default panels"
    if not show:  # the rest draws the runs too
        page.click("#show-runs")
        show = True
        check_panels(page, show)

    # the metric picker: another metric, drawn
    before = page.canvas(0)
    other = next(m["name"] for m in d["metrics"] if m["name"] != ps[0]["metric"] and m["runs"] > 0)
    page.b.eval(f"(() => {{ const s = document.querySelector('.panel .metric-picker'); s.value = {json.dumps(other)};"
                " s.dispatchEvent(new Event('change')); })()")
    page.settle()
    p0 = page.panels()[0]
    assert p0["metric"] == other
    assert (int(p0["series"]), int(p0["groups"]), int(p0["runLines"])) == expected_series(d, page.values, other, show)
    assert page.canvas(0)[0] != before[0], "the metric picker did not change the chart"

    # the seed toggle: the seed's runs leave every chart, the means change; back again
    seeds = page.b.eval("[...document.querySelectorAll('.seed-toggle')].map(c => c.value)")
    if len(seeds) > 1:
        s0 = seeds[0]
        drawn = [p["drawn"] for p in page.panels()]
        img = page.canvas(1)
        page.click(".seed-toggle", 0)
        ps = check_panels(page, show, hidden=lambda i: d["runs"][i]["seed"] == s0)
        assert any(p["drawn"] != x for p, x in zip(ps, drawn)), "hiding a seed changed no mean"
        assert page.canvas(1)[0] != img[0], "hiding a seed changed nothing drawn"
        page.click(".seed-toggle", 0)
        check_panels(page, show)

    # a group toggle, the log switch
    n_groups = len(groups_of(d, d["group_keys"]))
    if n_groups > 1:
        page.click(".group-toggle", 0)
        first = next(iter(groups_of(d, d["group_keys"]).values()))
        check_panels(page, show, hidden=lambda i: i in first)
        page.click(".group-toggle", 0)
    page.click(".log-switch", 0)
    assert page.panels()[0]["log"] == "true"
    page.click(".log-switch", 0)

    # grouping by another key (the seed): one group per seed
    if "run.seed" in d["key_names"] and len(seeds) > 1:
        idx = d["key_names"].index("run.seed")
        page.click(".group-key", idx)
        keys = [k for k in d["key_names"] if k in d["group_keys"] or k == "run.seed"]
        check_panels(page, show, keys=keys)
        page.click(".group-key", idx)
        check_panels(page, show)

    # zoom: a drag across the first chart (real mouse events) narrows every chart's x range; hover
    r = page.b.eval("""(() => { const o = document.querySelector('.panel .u-over'); o.scrollIntoView({block: 'center'});
      const r = o.getBoundingClientRect(); return [r.left, r.top, r.width, r.height]; })()""")
    y = r[1] + r[3] / 2
    if len(d["x"]) > 2:
        page.b.mouse("mouseMoved", r[0] + 0.3 * r[2], y)
        page.b.mouse("mousePressed", r[0] + 0.3 * r[2], y, button="left", clickCount=1)
        for f in (0.4, 0.5, 0.6):
            page.b.mouse("mouseMoved", r[0] + f * r[2], y, button="left", buttons=1)
        page.b.mouse("mouseReleased", r[0] + 0.6 * r[2], y, button="left", clickCount=1)
        page.b.pump(0.3)
        xs = page.b.eval("moerlDashboard.state.panels.map(p => [p.chart.scales.x.min, p.chart.scales.x.max])")
        assert all(lo > d["x"][0] and hi < d["x"][-1] for lo, hi in xs), f"zoom did not narrow every chart: {xs}"
        assert len({(round(lo, 6), round(hi, 6)) for lo, hi in xs}) == 1, f"charts zoomed apart: {xs}"
        page.click("#reset-zoom")
        xs = page.b.eval("moerlDashboard.state.panels.map(p => [p.chart.scales.x.min, p.chart.scales.x.max])")
        assert all(lo <= d["x"][0] and hi >= d["x"][-1] for lo, hi in xs), f"reset zoom: {xs}"
    page.b.mouse("mouseMoved", r[0] + 0.8 * r[2], y)
    page.b.pump(0.3)
    tip = page.b.eval("document.querySelector('.panel .tip').textContent")
    assert "step" in tip and "n=" in tip, f"hover shows no values: {tip!r}"

    # the run table: every run, sorting, the filter (charts follow), a run's scenario diff
    n_rows = page.b.eval("document.querySelectorAll('#run-table tr[data-run]').length")
    assert n_rows == len(d["runs"])
    page.b.eval("document.querySelectorAll('#run-table th')[1].click()")
    ids = page.b.eval("[...document.querySelectorAll('#run-table tr[data-run]')].map(r => r.dataset.run)")
    assert ids == sorted(ids, key=lambda s: s) or ids == sorted(ids), "sorting by run"
    if n_groups > 1:  # key=value of the first run's group keys: its group only
        r0 = d["runs"][next(iter(groups_of(d, d["group_keys"]).values()))[0]]
        want = " ".join(f"{k}={r0['source'] if k == 'source' else r0['keys'].get(k, '')}" for k in d["group_keys"])
        page.b.eval(f"(() => {{ const f = document.getElementById('run-filter'); f.value = {json.dumps(want)};"
                    " f.dispatchEvent(new Event('input')); })()")
        page.settle()
        assert all(int(p["groups"]) == 1 for p in page.panels()), "the filter did not reach the charts"
        page.b.eval("(() => { const f = document.getElementById('run-filter'); f.value = '';"
                    " f.dispatchEvent(new Event('input')); })()")
        page.settle()
    page.click(".run-link", 0)
    diff = page.b.eval("document.getElementById('diff').textContent")
    assert "scenario against the base" in diff
    if any(r["diff"] for r in d["runs"]):
        k = next(i for i, r in enumerate(d["runs"]) if r["diff"])
        rid = d["runs"][k]["id"]
        page.b.eval(f"[...document.querySelectorAll('.run-link')].find(a => a.textContent === {json.dumps(rid)}).click()")
        page.b.pump(0.2)
        cells = page.b.eval("[...document.querySelectorAll('#diff .diff-table td')].map(c => c.textContent)")
        assert d["runs"][k]["diff"][0][0] in cells, "the diff table"

    # expert load of one run, the tables
    if any(r["load"] for r in d["runs"]):
        page.b.wait_for("document.querySelector('#load-view canvas') !== null", what="the heatmap")
        rows = page.b.eval("+document.getElementById('load-view').dataset.rows")
        assert rows > 0
    for t in d["tables"]:
        n = page.b.eval(f"document.querySelectorAll('#table-{t['id']} tr').length")
        assert n == len(t["rows"]) + 1, f"table {t['id']}"
    page.no_errors()
    print(f"dashboard_browser: {label}: {len(page.panels())} charts, {len(d['runs'])} runs, "
          f"{len(d['metrics'])} metrics: ok")
    return page


def synthetic(d, seeds, steps, variants):
    from analysis.tests.test_response_panels import NEW, write_run
    import h5py
    import numpy as np
    os.makedirs(d, exist_ok=True)
    for v in variants:
        for s in range(seeds):
            p = os.path.join(d, f"{v}-seed{s}.h5")
            write_run(p, s, v, NEW, steps=steps)
            with h5py.File(p, "a") as f:
                # its length in its scenario, as a real run's: runs of two lengths are two experiments
                # (runs of one scenario and seed are one run, which a report counts once)
                f.attrs["scenario"] = f.attrs["scenario"] + f"rl.steps = {steps}\n"
                g = np.random.default_rng(s)
                f["metrics/expert_load"] = g.random((steps, 2, 4)) * 100
                f["metrics/rc_ess_seq"] = np.clip(0.9 + g.normal(0, 0.05, steps), 0, 1)
                f["metrics/rc_ess_token"] = np.clip(0.95 + g.normal(0, 0.03, steps), 0, 1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("moerl")
    ap.add_argument("--screenshot", help="write a screenshot of the synthetic report here")
    ap.add_argument("--keep", help="work in this directory (default: a temporary one)")
    args = ap.parse_args()
    work = args.keep or tempfile.mkdtemp(prefix="moerl-dashboard-")
    py = sys.executable
    sweep = os.path.join(work, "tiny")
    if not os.path.exists(os.path.join(sweep, "index.json")):
        p = subprocess.run([args.moerl, "sweep", os.path.join(ROOT, "tests", "sweep", "tiny-grid.ini"), "--out", sweep,
                            "--quiet"], capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stdout + p.stderr
    p = subprocess.run([args.moerl, "report", sweep, "--quiet"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    a, b = os.path.join(work, "grid"), os.path.join(work, "long")
    synthetic(a, 3, 60, ("grpo", "r3", "control"))
    synthetic(b, 2, 3000, ("grpo",))
    both = os.path.join(work, "both")
    p = subprocess.run([py, "-m", "analysis", a, b, "--out", both, "--quiet"], cwd=ROOT, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    browser = Browser()
    try:
        check_report(browser, os.path.join(sweep, "report"), "tiny sweep")
        page = check_report(browser, both, "two sources side by side")
        d = page.d
        assert {r["source"] for r in d["runs"]} == {"grid", "long"}
        assert d["group_keys"][0] == "source" and d["bin"] == 6, (d["group_keys"], d["bin"])
        assert re.search(r"grid", " ".join(groups_of(d, d["group_keys"])))
        if args.screenshot:
            page = Page(browser, os.path.join(work, "grid", "report") if os.path.exists(
                os.path.join(work, "grid", "report")) else both)
            browser.screenshot(args.screenshot, 1400, 1000)
    finally:
        browser.close()
    print("dashboard_browser: ok")


if __name__ == "__main__":
    main()

"""The league with one new variant (scripts/league.sh): the plan before any run, and the
reproducibility guard before anything is joined. scripts/league.sh is the command; this module is
its two steps that read the kept league, each refusing with one line that names the option, the
value and what is allowed.

    /usr/bin/python3 -m analysis.league_add plan --grid GRID --kept CSV --variant NAME --set K=V ...
                                                 [--seeds LIST] [--rerun] --out DIR
    /usr/bin/python3 -m analysis.league_add guard --kept CSV --dir GUARD_DIR --seed SEED
                                                  [--runs-to-start N --parallel P]

plan     checks the options against the league grid (GRID, default scenarios/paper/learn-league.ini)
         and the kept league (CSV, its league-runs.csv), writes DIR/grid.ini (the league's base,
         its scenario keys and its reference variant, plus the new variant: the --set keys under
         the name given) and DIR/plan.sh (shell assignments for scripts/league.sh: the grid, the
         seeds, the guard's seed, how many runs are still to start), and prints the plan.
         Refused: a variant name the kept league has (unless --rerun: its runs are then joined only
         if they reproduce the kept rows), the reference's name, a name moerl would not take; a
         --set that is not section.key=value, or one key twice; a seed the kept league has no
         finished reference run on; a grid that sweeps a key (the league's variants are its axis).
guard    compares the reference run on the first league seed, re-run by today's binary into
         GUARD_DIR, with its kept row: every number of league-runs.csv, with the comparison
         `analysis.league --runs` makes when it joins (numpy isclose, rtol 1e-5: the file's 6
         significant digits). A difference is refused, naming each number, kept and now: a changed
         engine is never compared with stale baselines. On success it prints how long the guard
         run took and, from that, about how long the runs still to start will take.
"""
import configparser
import os
import re
import shlex
from collections import OrderedDict

from .cli import AnalysisError, Entry

# scripts/league.sh sets MOERL_PROG and MOERL_ERROR_PREFIX so that a refusal reads "league.sh: error: ...".
entry = Entry(__name__, "analysis.league_add", prog=os.environ.get("MOERL_PROG") or None,
              prefix=os.environ.get("MOERL_ERROR_PREFIX") or None)
with entry.imports():
    from . import league

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.+_-]*$")  # a variant name moerl keeps in a run id as it is
KEY_RE = re.compile(r"^[a-z_][a-z0-9_]*\.[a-z0-9_.]+$")   # section.key
SWEEP_OWN = ("base", "seeds", "variants")                 # the [sweep] keys the league grid may have


def parse_seeds(text, option="--seeds"):
    """0,1,2 or 700-719 or 700-704,710 → [int] (moerl sweep's form), refusing anything else."""
    out = []
    for part in text.split(","):
        part = part.strip()
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not m or (m.group(2) is not None and int(m.group(2)) < int(m.group(1))):
            raise AnalysisError(f"{option} {text}: {part!r} is not a seed or a range low-high "
                                f"(allowed: e.g. 700-719 or 700,703,710)")
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) is not None else lo
        out += [s for s in range(lo, hi + 1) if s not in out]
    return out


def read_grid(path):
    """(config, base, seeds, variants) of a league grid file: its [sweep] base (made absolute), seeds
    and variants; refused when it sweeps a key (the league's only axis is its variants)."""
    if not os.path.isfile(path):
        raise AnalysisError(f"--grid {path}: no such file (the league grid, e.g. scenarios/paper/learn-league.ini)")
    cp = configparser.ConfigParser(interpolation=None, inline_comment_prefixes=("#",), strict=True)
    cp.optionxform = str  # scenario keys keep their case
    try:
        cp.read(path, encoding="utf-8")
    except configparser.Error as e:
        raise AnalysisError(f"--grid {path}: not a grid file ({str(e).splitlines()[0]})")
    if not cp.has_section("sweep"):
        raise AnalysisError(f"--grid {path}: no [sweep] section (a league grid has base, seeds and variants)")
    sweep = cp["sweep"]
    swept = [k for k in sweep if k not in SWEEP_OWN]
    if swept:
        raise AnalysisError(f"--grid {path}: it sweeps {', '.join(swept)}; the league's only axis is its variants "
                            f"(allowed in [sweep]: {', '.join(SWEEP_OWN)})")
    base = sweep.get("base", "").strip()
    if base and not os.path.isabs(base):
        base = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(path)), base))
    seeds = parse_seeds(sweep.get("seeds", ""), f"--grid {path}: seeds =") if sweep.get("seeds") else []
    variants = [v.strip() for v in sweep.get("variants", "").split(",") if v.strip()]
    return cp, base, seeds, variants


def parse_sets(sets):
    """--set section.key=value ... → OrderedDict, refusing a malformed one or a key given twice."""
    out = OrderedDict()
    for s in sets:
        key, sep, value = s.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not KEY_RE.match(key) or not value:
            raise AnalysisError(f"--set {s}: expected section.key=value (e.g. --set rl.algorithm=sapo)")
        if key in out:
            raise AnalysisError(f"--set {key}: given twice ({out[key]} and {value}); a variant sets a key once")
        out[key] = value
    return out


def grid_text(cp, base, seeds, reference, name, sets, source):
    """The grid of the league with one variant: the league's base and scenario keys, its reference
    variant as it sets it, and `name` with the --set keys. The reference's run is the kept one's to
    the bit: the same scenario from the same base (the guard checks that)."""
    lines = [f"# Written by scripts/league.sh from {source}: its base, scenario keys and reference variant,",
             f"# and the variant {name} (its --set keys). Every key not set here is the base's.",
             "[sweep]"]
    if base:
        lines.append(f"base = {base}")
    lines += [f"seeds = {', '.join(str(s) for s in seeds)}", f"variants = {reference}, {name}"]
    for sec in cp.sections():
        if sec == "sweep" or sec.startswith("variant."):
            continue
        lines.append(f"[{sec}]")
        lines += [f"{k} = {v}" for k, v in cp[sec].items()]
    ref = f"variant.{reference}"
    lines.append(f"[{ref}]")
    if cp.has_section(ref):
        lines += [f"{k} = {v}" for k, v in cp[ref].items()]
    lines.append(f"[variant.{name}]")
    lines += [f"{k} = {v}" for k, v in sets.items()]
    return "\n".join(lines) + "\n"


def finished_seeds(rows, variant):
    return [int(x["seed"]) for x in rows if x["variant"] == variant and x["status"] in league.FINISHED
            and str(x["seed"]).isdigit()]


def done_in(sweep_dir, variant):
    """Seeds of `variant` already finished in a sweep directory (its index.csv), for a resumed plan."""
    import csv
    path = os.path.join(sweep_dir, "index.csv")
    if not os.path.isfile(path):
        return set()
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    out = set()
    for r in rows:
        if r.get("status") in league.FINISHED and r.get("variant") == variant:
            m = re.search(r"-seed(\d+)$", r.get("id", ""))
            if m:
                out.add(int(m.group(1)))
    return out


def fmt_seeds(seeds):
    """700-719, or 700, 703 when not a range."""
    if seeds and seeds == list(range(seeds[0], seeds[-1] + 1)) and len(seeds) > 2:
        return f"{seeds[0]}-{seeds[-1]}"
    return ",".join(str(s) for s in seeds)


def plan(args):
    cp, base, grid_seeds, grid_variants = read_grid(args.grid)
    reference = args.reference
    if reference not in grid_variants:
        raise AnalysisError(f"--grid {args.grid}: no variant {reference!r} (its variants: {', '.join(grid_variants)}); "
                            f"the guard re-runs the reference")
    kept = league.read_runs_csv(args.kept)
    score_names = sorted({x["score_name"] for x in kept})
    kept_variants = list(OrderedDict.fromkeys(x["variant"] for x in kept))
    name = args.variant
    if not NAME_RE.match(name):
        raise AnalysisError(f"--variant {name!r}: not a variant name (allowed: letters, digits and . + _ -, "
                            f"starting with a letter or digit, e.g. clipped-reinforce)")
    if name == reference:
        raise AnalysisError(f"--variant {name}: the reference's name; the new variant needs its own")
    if name in kept_variants and not args.rerun:
        raise AnalysisError(f"--variant {name}: the kept league ({args.kept}) already has it (kept variants: "
                            f"{', '.join(kept_variants)}); choose another name, or pass --rerun to run it again "
                            f"(joined only if it reproduces the kept rows)")
    sets = parse_sets(args.set)
    if not sets:
        raise AnalysisError("--set: none given; a variant is the keys it sets (e.g. --set rl.algorithm=sapo)")
    ref_seeds = finished_seeds(kept, reference)
    if not ref_seeds:
        raise AnalysisError(f"--kept {args.kept}: no finished run of the reference {reference!r}; "
                            f"a league needs it on every seed")
    league_seeds = [s for s in grid_seeds if s in ref_seeds] or sorted(ref_seeds)
    seeds = parse_seeds(args.seeds) if args.seeds else league_seeds
    outside = [s for s in seeds if s not in ref_seeds]
    if outside:
        raise AnalysisError(f"--seeds {args.seeds}: seed {outside[0]} is not in the kept league (allowed: its seeds, "
                            f"{fmt_seeds(sorted(ref_seeds))}); new seeds need every kept variant re-run: "
                            f"scenarios/paper/learn-league.sh")
    guard_seed = league_seeds[0]
    os.makedirs(args.out, exist_ok=True)
    grid = os.path.join(os.path.abspath(args.out), "grid.ini")
    text = grid_text(cp, base, seeds, reference, name, sets, args.grid)
    with open(grid + ".tmp", "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(grid + ".tmp", grid)
    done = done_in(os.path.join(args.out, "runs"), name)
    todo = [s for s in seeds if s not in done]
    assign = OrderedDict([("grid", grid), ("seeds", fmt_seeds(seeds)), ("guard_seed", str(guard_seed)),
                          ("reference", reference), ("n_todo", str(len(todo))), ("n_seeds", str(len(seeds))),
                          ("score", score_names[0] if score_names else "eval_final")])
    with open(os.path.join(args.out, "plan.sh"), "w", encoding="utf-8") as f:
        f.write("".join(f"{k}={shlex.quote(v)}\n" for k, v in assign.items()))
    print(f"league.sh: {name} ({', '.join(f'{k}={v}' for k, v in sets.items())}) against the kept league "
          f"{args.kept}: {len(kept_variants)} variants, {len(kept)} runs")
    print(f"league.sh: seeds {fmt_seeds(seeds)}: {_runs(len(todo))} of {name} to start"
          + (f" ({len(done)} already finished in {os.path.join(args.out, 'runs')})" if done else "")
          + f", after 1 guard run ({reference} on seed {guard_seed}, compared with its kept row)")
    p = max(1, args.parallel)
    last = _run_seconds(os.path.join(args.out, "guard"))
    print(f"league.sh: {p} run{'s' if p > 1 else ''} at a time on {os.cpu_count()} cores; "
          + (f"about {_dur(last)} for the guard and {_estimate(len(todo), p, last)} for the rest "
             f"(the last guard run's time, in {os.path.join(args.out, 'guard')})" if last else
             "the guard run's time gives the estimate for the rest"))


def guard(args):
    kept = league.read_runs_csv(args.kept)
    score = next((x["score_name"] for x in kept), "eval_final")
    seed = str(args.seed)
    mine = [x for x in kept if x["variant"] == args.reference and str(x["seed"]) == seed]
    if not mine:
        raise AnalysisError(f"--kept {args.kept}: no row of {args.reference}/{seed} to compare the guard run with")
    k = mine[0]
    per_run, _ = league.rows_of_runs(league.read_dirs([args.dir]), score)
    now = [x for x in per_run if x["variant"] == args.reference and str(x["seed"]) == seed]
    if not now:
        raise AnalysisError(f"{args.dir}: the guard run {args.reference}/{seed} wrote no metrics (see its index.csv)")
    n = now[0]
    if n["status"] not in league.FINISHED:
        raise AnalysisError(f"{args.dir}: the guard run {args.reference}/{seed} is {n['status']}, not finished "
                            f"(see {os.path.join(args.dir, 'index.csv')}); run the command again to resume it")
    bad = [f"{c}: kept {_text(k[c])}, now {_text(n[c])}" for c in k if c in n and not league._same(k[c], n[c])]
    if bad:
        raise AnalysisError(
            f"the reproducibility guard failed: today's moerl does not reproduce the kept run {args.reference}/{seed} "
            f"({k.where.replace('--runs ', '', 1)}; re-run in {args.dir}): " + "; ".join(bad) +
            f" ({len(bad)} of {len(k)} columns differ beyond rtol 1e-5). The kept league was made by another engine: "
            f"nothing was run or joined. Re-run the kept league with this binary (scenarios/paper/learn-league.sh), "
            f"or build the commit that made it")
    seconds = _run_seconds(args.dir)
    print(f"league.sh: guard passed: {args.reference}/{seed} re-run today agrees with its kept row on all "
          f"{len(k)} columns (rtol 1e-5)" + (f"; it took {_dur(seconds)}" if seconds else ""))
    if args.runs_to_start and seconds:
        p = max(1, args.parallel)
        print(f"league.sh: estimate: {_runs(args.runs_to_start)}, {p} at a time on {os.cpu_count()} cores: "
              f"{_estimate(args.runs_to_start, p, seconds)} (from the guard run's time, which had every core"
              f"{'; side by side each run has 1/' + str(p) + ' of them' if p > 1 else ''}), plus a base policy "
              f"(SFT) for each seed whose base is not in the cache")


def _runs(n):
    return f"{n} run{'s' if n != 1 else ''}"


def _estimate(n, p, seconds):
    """n runs, p at a time, from one run of `seconds` that had every core (the guard): each of p
    runs side by side has 1/p of the cores, so it takes between `seconds` (a run that gains nothing
    from more threads) and p × `seconds` (one that gains fully): "10 rounds × 2.5–4.9 min ≈ 24–49 min"."""
    rounds = -(-n // p)
    if p == 1:
        return f"{rounds} × {_dur(seconds)} ≈ {_dur(rounds * seconds)}"
    return (f"{rounds} round{'s' if rounds != 1 else ''} × {_dur(seconds)}–{_dur(p * seconds)} ≈ "
            f"{_dur(rounds * seconds)}–{_dur(rounds * p * seconds)}")


def _text(v):
    return f"{v:.6g}" if isinstance(v, float) else str(v)


def _dur(s):
    s = int(round(s))
    return (f"{s} s" if s < 120 else f"{s / 60:.1f} min" if s < 600 else f"{s // 60} min" if s < 7200
            else f"{s / 3600:.1f} h")


def _run_seconds(d):
    import csv
    path = os.path.join(d, "index.csv")
    if not os.path.isfile(path):
        return None
    with open(path, newline="", encoding="utf-8") as f:
        for r in csv.DictReader(f):
            try:
                return float(r.get("seconds", ""))
            except ValueError:
                return None
    return None


def main(argv=None):
    ap = entry.parser(description="The league with one new variant: the plan and the reproducibility guard "
                                  "(scripts/league.sh runs both).")
    ap.add_argument("step", choices=("plan", "guard"))
    ap.add_argument("--grid")
    ap.add_argument("--kept", required=True)
    ap.add_argument("--variant")
    ap.add_argument("--set", action="append", default=[])
    ap.add_argument("--seeds")
    ap.add_argument("--reference", default="control")
    ap.add_argument("--rerun", action="store_true")
    ap.add_argument("--out")
    ap.add_argument("--dir")
    ap.add_argument("--seed")
    ap.add_argument("--runs-to-start", type=int)
    ap.add_argument("--parallel", type=int, default=1)
    args = ap.parse_args(argv)
    need = ("grid", "variant", "out") if args.step == "plan" else ("dir", "seed")
    for k in need:
        if getattr(args, k) is None:
            ap.error(f"{args.step} needs --{k}")
    return plan(args) if args.step == "plan" else guard(args)


if __name__ == "__main__":
    entry.run(main)

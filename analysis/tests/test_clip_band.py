"""The clip band drawn over a run's ratios comes from the resolved clip_low / clip_high the results
file records (docs/hdf5-schema.md), not from a guess by algorithm name; a file from before those
attributes falls back to the scenario's keys and the defaults of that time."""
from types import SimpleNamespace

from analysis.plots import _clip_band


def test_the_recorded_clip_range_is_drawn():
    run = SimpleNamespace(attrs={"clip_low": 0.1, "clip_high": 0.28}, scenario={"rl.algorithm": "gspo"})
    assert _clip_band(run) == (1 - 0.1, 1 + 0.28)


def test_an_old_file_falls_back_to_its_scenario():
    gspo = SimpleNamespace(attrs={}, scenario={"rl.algorithm": "gspo"})
    assert _clip_band(gspo) == (1 - 3e-4, 1 + 4e-4)
    set_low = SimpleNamespace(attrs={}, scenario={"rl.algorithm": "grpo", "rl.clip_low": "0.1"})
    assert _clip_band(set_low) == (1 - 0.1, 1 + 0.2)

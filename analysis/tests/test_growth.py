"""analysis.growth: the last-over-first growth and the k3–margin correlation, on runs made here."""
import numpy as np

from analysis import growth


class FakeRun:
    def __init__(self, variant, seed, **series):
        self.keys = {"variant": variant}
        self._seed = seed
        self._series = {k: np.asarray(v, dtype=float) for k, v in series.items()}

    def series(self, name):
        return self._series.get(name)

    def value(self, key):
        return self._seed if key == "run.seed" else None


def test_growth_is_the_last_tenth_over_the_first():
    r = FakeRun("grpo", 0, kl_rollout_train=[1.0] * 10 + [2.0] * 80 + [3.0] * 10)
    assert growth.growth(r, "kl_rollout_train") == 3.0
    assert np.isnan(growth.growth(r, "router_margin_p10"))  # absent: an older file


def test_a_mismatch_that_grows_as_the_margin_shrinks_correlates_negatively():
    steps = np.arange(50)
    k3 = 1e-3 * (1 + steps / 10)
    margin = 2.0 - steps / 50  # shrinks linearly while k3 grows linearly
    r = FakeRun("grpo", 0, kl_rollout_train=k3, router_margin_p10=margin)
    assert growth.correlation(r, "kl_rollout_train", "router_margin_p10") < -0.99
    flat = FakeRun("grpo", 0, kl_rollout_train=k3, router_margin_p10=np.ones(50))
    assert np.isnan(growth.correlation(flat, "kl_rollout_train", "router_margin_p10"))


def test_rows_group_by_variant_and_table_names_every_quantity():
    runs = [FakeRun(v, s, kl_rollout_train=np.linspace(1, 1 + s + (v == "grpo"), 20),
                    router_margin_p10=np.linspace(2, 1, 20)) for v in ("grpo", "control") for s in (0, 1)]
    rs = growth.rows(runs)
    assert [x["variant"] for x in rs] == ["grpo", "control"]
    assert rs[0]["runs"] == 2
    m, h = rs[0]["k3"]
    assert m > rs[1]["k3"][0]  # grpo's k3 grows more in these runs
    md = growth.table_md(rs)
    for label in growth.QUANTITIES:
        assert label in md
    assert md.count("\n| grpo |") == 1

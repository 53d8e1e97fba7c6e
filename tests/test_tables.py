"""Reproduction tables: the selection rule of swept methods ("best of a sweep")."""

import pandas as pd

from fed.reporting.tables import build_table, select_variants


def runs(rows):
    return pd.DataFrame(
        [
            dict(dataset="d", partition="p", method=m, seed=s, protocol="last", metric=k, value=v, diverged=False)
            for m, s, k, v in rows
        ]
    )


def test_swept_method_shows_the_variant_best_on_held_out_client_data_not_on_the_test_set():
    # mu=0.1 is best on the clients' local test splits (selection data); mu=1 is best on the external test set
    r = runs(
        [
            ("fedprox-mu0.1", 0, "local_acc_mean", 80.0),
            ("fedprox-mu0.1", 1, "local_acc_mean", 82.0),
            ("fedprox-mu1", 0, "local_acc_mean", 70.0),
            ("fedprox-mu1", 1, "local_acc_mean", 71.0),
            ("fedprox-mu0.1", 0, "global_acc", 60.0),
            ("fedprox-mu0.1", 1, "global_acc", 62.0),
            ("fedprox-mu1", 0, "global_acc", 90.0),
            ("fedprox-mu1", 1, "global_acc", 91.0),
        ]
    )
    sweeps = {"fedprox": ["fedprox-mu0.1", "fedprox-mu1"]}
    assert select_variants(r, sweeps, "local_acc_mean") == {("d", "p", "fedprox"): "fedprox-mu0.1"}
    empty = pd.DataFrame(columns=["table", "dataset", "partition", "method", "metric", "value", "std"])
    table = build_table(
        r, empty, "T", ["d"], ["p"], {"fedprox": "fedprox"}, ["global_acc"], "last", {"fedprox"}, sweeps
    )
    row = table.iloc[0]
    assert row["ours_mean"] == 61.0 and row["variant"] == "fedprox-mu0.1 (best local_acc_mean of 2)"


def test_the_privacy_ledger_lists_what_left_the_clients_per_method(tmp_path):
    import json

    from fed.reporting.tables import privacy_table

    ledgers = {
        ("fedavg", 0): {},
        ("feddpms", 0): {"decoders": 10, "noisy_latent_means": 500, "epsilon_exact": 20.0, "delta": 0.01},
        ("feddpms", 1): {"decoders": 10, "noisy_latent_means": 600, "epsilon_exact": 27.8, "delta": 0.01},
        ("dafl", 0): {"generated_samples": 60, "epsilon_gan": "inf", "delta": 1e-5},
    }
    cells = []
    for (method, seed), shared in ledgers.items():
        path = tmp_path / f"{method}{seed}.json"
        path.write_text(json.dumps({"shared": shared}))
        cells.append(dict(dataset="fmnist", partition="dir0.1", method=method, seed=seed, path=path))
    df = privacy_table(cells).set_index("method")
    assert list(df.index) == ["fedavg", "feddpms", "dafl"]
    assert df.loc["feddpms", "noisy_latent_means"] == 600 and df.loc["feddpms", "epsilon_exact"] == 27.8  # largest
    assert df.loc["dafl", "epsilon_gan"] == "inf" and pd.isna(df.loc["fedavg", "decoders"])  # FedAvg shares nothing


def test_the_cost_table_divides_by_the_named_baseline_and_keeps_runs_that_trained_no_round(tmp_path):
    """Wall time relative to the board's FedAvg (the protocol's ``p_fedavg``: hand-computed ratios), a run's local
    steps (summed over its rounds, mean over seeds), and a run that diverged in its tuning and trained no round
    (empty history) counted with no seconds a round, not a KeyError."""
    import json
    import math

    from fed.reporting.tables import cost_table

    runs = {  # (method, seed) -> wall seconds, per-round seconds (empty: trained no round)
        ("p_fedavg", 0): (40.0, [2.0, 2.0]),
        ("p_fedavg", 1): (60.0, [3.0, 3.0]),
        ("p_feddata", 0): (400.0, [20.0, 20.0]),
        ("p_feddata", 1): (600.0, [30.0, 30.0]),
        ("p_feddpms", 0): (0.001, []),
    }
    cells = []
    for (method, seed), (wall, seconds) in runs.items():
        path = tmp_path / f"{method}{seed}.json"
        history = [{"round": i + 1, "seconds": s, "local_steps": 10 * wall} for i, s in enumerate(seconds)]
        path.write_text(json.dumps({"wall_seconds": wall, "rounds_completed": len(seconds), "history": history}))
        cells.append(dict(dataset="fmnist", partition="h2h_scarce", method=method, seed=seed, path=path))
    df = cost_table(cells, baseline="p_fedavg").set_index("method")
    assert df.loc["p_fedavg", "relative_to_fedavg"] == 1.0
    assert df.loc["p_feddata", "relative_to_fedavg"] == 10.0  # 500 s over 50 s
    assert df.loc["p_feddata", "seconds_per_round"] == 25.0
    assert df.loc["p_feddata", "local_steps"] == 10_000.0  # a run's sum over rounds (2 × 4,000; 2 × 6,000), mean
    assert df.loc["p_feddpms", "rounds"] == 0 and math.isnan(df.loc["p_feddpms", "seconds_per_round"])
    assert cost_table(cells)["relative_to_fedavg"].isna().all()  # no method named fedavg: no ratio, not a wrong one

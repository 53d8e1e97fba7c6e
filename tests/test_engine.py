import io
import json
import math
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest
import torch

from fed import checkpoint
from fed.algorithms import build_algorithm
from fed.config import FLConfig
from fed.data.datasets import load_dataset, load_labels
from fed.data.partition import make_partition
from fed.engine import Engine
from fed.reporting.tables import build_table, collect_runs

SMALL = dict(num_clients=10, fraction=0.3, rounds=3, local_epochs=1, batch_size=20, eval_every=1)


@pytest.fixture(scope="module")
def setup(synthetic_root, tmp_path_factory):
    part = make_partition(load_labels("synthetic", synthetic_root), "unimodal", 10, seed=0)
    path = tmp_path_factory.mktemp("part") / "part.json"
    path.write_text(json.dumps(part))
    return (
        load_dataset("synthetic", synthetic_root, "train"),
        load_dataset("synthetic", synthetic_root, "test"),
        part,
        path,
    )


def run(setup, algo="fedavg", seed=0, work_dir=None, params=None, **overrides):
    train, test, part, _ = setup
    cfg = FLConfig(**(SMALL | overrides))
    return Engine(
        cfg, build_algorithm(algo, **(params or {})), train, test, part, seed, work_dir=work_dir, progress=None
    ).run()


def strip(history):
    return [{k: v for k, v in row.items() if k != "seconds"} for row in history]


def test_same_seed_same_numbers_other_seed_differs(setup):
    a, b, c = run(setup, seed=0), run(setup, seed=0), run(setup, seed=1)
    assert strip(a["history"]) == strip(b["history"])
    assert strip(a["history"]) != strip(c["history"])
    last = a["last"]
    assert 0 <= last["global_acc"] <= 100 and len(last["per_class_acc"]) == 10 and len(last["local_acc"]) == 10
    assert last["local_acc_mean"] == pytest.approx(sum(last["local_acc"]) / 10)


def test_pooled_accuracy_counts_every_local_record_once(setup):
    """pooled_acc: every client's local records as one set, so a client counts by its number of records."""
    train, test, part, _ = setup
    part = json.loads(json.dumps(part))
    part["clients"][0]["test"] = part["clients"][0]["test"][:3]  # clients of unequal size
    cfg = FLConfig(**SMALL)
    last = Engine(cfg, build_algorithm("fedavg"), train, test, part, 0, progress=None).run()["last"]
    sizes = [len(c["test"]) for c in part["clients"]]
    pooled = sum(a * n for a, n in zip(last["local_acc"], sizes)) / sum(sizes)
    assert last["pooled_acc"] == pytest.approx(pooled) and len(set(sizes)) > 1
    assert pooled != pytest.approx(last["local_acc_mean"])  # the weighting is seen: not the mean of the clients


def test_learns_on_synthetic_data(setup):
    res = run(setup, rounds=6, local_epochs=2)
    assert res["last"]["global_acc"] > 40  # chance is 10 %


def test_fedprox_large_mu_stays_near_global_model(setup):
    train, test, part, _ = setup

    def drift(algo, **params):
        engine = Engine(
            FLConfig(**(SMALL | {"rounds": 1})), build_algorithm(algo, **params), train, test, part, 0, progress=None
        )
        start = {k: v.clone() for k, v in engine.global_state.items()}
        engine.run()
        return sum(float((engine.global_state[k] - start[k]).pow(2).sum()) for k, _ in engine.model.named_parameters())

    assert drift("fedprox", mu=40.0) < 0.7 * drift("fedavg")  # lr*mu = 0.8: strong, stable pull


def test_qffl_q0_matches_fedavg_with_simple_mean(setup):
    fedavg = run(setup, "fedavg", aggregation="mean")
    q0 = run(setup, "qffl", params={"q": 0.0}, aggregation="mean")
    for r1, r2 in zip(fedavg["history"], q0["history"]):
        assert r1["global_acc"] == pytest.approx(r2["global_acc"], abs=0.34)  # float32 vs float64 path


def test_centralized_trains_on_pooled_data(setup):
    res = run(setup, "centralized", rounds=2)
    assert res["last"]["global_acc"] > 40


def test_divergence_is_recorded_not_averaged(setup, tmp_path):
    bad = run(setup, lr=1e12, rounds=3)
    assert bad["diverged"] and bad["diverged_round"] >= 1 and math.isnan(bad["last"]["global_acc"])
    good = run(setup)
    cells = []
    for seed, res in enumerate([good, bad]):
        path = tmp_path / f"{seed}.json"
        path.write_text(json.dumps(res))
        cells.append(dict(dataset="synthetic", partition="unimodal", method="fedavg", seed=seed, path=path))
    table = build_table(
        collect_runs(cells),
        pd.DataFrame(columns=["table", "dataset", "partition", "method", "metric", "value", "std"]),
        "Table 2",
        ["synthetic"],
        ["unimodal"],
        {"fedavg": "fedavg"},
        ["global_acc"],
        "last",
        {"fedavg"},
    )
    row = table.iloc[0]
    assert row["diverged_seeds"] == 1 and row["seeds"] == 1 and row["verdict"] == "no paper value"
    assert row["ours_mean"] == pytest.approx(good["last"]["global_acc"])


def test_a_run_whose_tuning_diverged_everywhere_trains_nothing_beside_a_checkpoint_of_its_identity(setup, tmp_path):
    """A method whose every tuning point diverged reports diverged before round 1 (docs/headtohead-protocol.md, 2.5);
    a finished checkpoint of the same identity in its work dir (an earlier run of the cell) must not turn it back into
    a trained run."""
    train, test, part, _ = setup

    def engine(**kwargs):
        cfg = FLConfig(**(SMALL | {"checkpoint_every": 1}))
        return Engine(cfg, build_algorithm("fedavg"), train, test, part, 0, work_dir=tmp_path, progress=None, **kwargs)

    trained = engine().run()
    assert trained["rounds_completed"] == 3 and not trained["diverged"]
    out = engine(diverged_in_tuning=True).run()
    assert out["diverged"] and out["diverged_round"] == 0 and out["history"] == [] and out["rounds_completed"] == 0
    assert math.isnan(out["last"]["global_acc"]) and out["best"] == {}


@pytest.mark.parametrize(("minutes", "saved"), [(0, [4]), (1e-9, [1, 2, 3, 4])])
def test_a_checkpoint_also_comes_after_checkpoint_minutes(setup, tmp_path, minutes, saved):
    """``checkpoint_minutes``: a round that ends that long after the last checkpoint checkpoints, whatever
    ``checkpoint_every`` says (slow rounds lose at most that much to a kill); 0 leaves it to the rounds. Checkpointing
    changes no number (resuming from any checkpoint: ``test_kill_and_resume_equals_uninterrupted``)."""
    train, test, part, _ = setup

    class Recording(Engine):
        def save_checkpoint(self, wall):
            rounds.append(self.ctx.round)
            super().save_checkpoint(wall)

    rounds: list[int] = []
    cfg = FLConfig(**(SMALL | dict(rounds=4, checkpoint_every=100, checkpoint_minutes=minutes)))
    out = Recording(cfg, build_algorithm("fedavg"), train, test, part, 0, work_dir=tmp_path, progress=None).run()
    assert rounds == saved
    assert strip(out["history"]) == strip(run(setup, rounds=4)["history"])


def test_checkpoint_of_other_settings_is_not_resumed(setup, tmp_path):
    run(setup, work_dir=tmp_path, checkpoint_every=1)
    other = run(setup, work_dir=tmp_path, lr=0.05)  # same work dir, different lr: must start from scratch
    assert strip(other["history"]) == strip(run(setup, lr=0.05)["history"])


def test_kill_and_resume_equals_uninterrupted(setup, synthetic_root, tmp_path):
    """SIGKILL a real training process mid-run; the restarted job resumes and ends with identical numbers."""
    part_path = setup[3]

    def cmd(out):
        return [
            sys.executable,
            "-m",
            "fed.cli",
            "run",
            "synthetic",
            str(part_path),
            "fedavg",
            "--root",
            str(synthetic_root),
            "-o",
            str(out),
            "--seed",
            "5",
            "--preset",
            "fedzda",
            "--set",
            "rounds=8",
            "--set",
            "local_epochs=3",
            "--set",
            "num_clients=10",
            "--set",
            "fraction=0.3",
            "--set",
            "batch_size=10",
            "--set",
            "checkpoint_every=1",
            "--set",
            "eval_every=1",
        ]

    subprocess.run(cmd(tmp_path / "straight"), check=True, capture_output=True)
    killed = tmp_path / "killed"
    proc = subprocess.Popen(cmd(killed), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ckpt = killed / "work" / "checkpoint.pt"
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        if ckpt.exists():
            import torch

            try:
                if torch.load(ckpt, weights_only=True)["round"] >= 2:
                    break
            except Exception:
                pass
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the run finished before it could be killed"
    assert not (killed / "metrics.json").exists()
    resumed = subprocess.run(cmd(killed), check=True, capture_output=True, text=True)
    assert "resumed from" in resumed.stderr
    a = json.loads((tmp_path / "straight" / "metrics.json").read_text())
    b = json.loads((killed / "metrics.json").read_text())
    assert strip(a["history"]) == strip(b["history"]) and len(a["history"]) == 8


@pytest.mark.parametrize("algo", ["scaffold", "moon"])
def test_client_state_on_disk_survives_a_torn_checkpoint(setup, tmp_path, algo):
    """Per-client state (SCAFFOLD's c_i, MOON's previous model) lives on disk per client and round. A truncated
    checkpoint falls back to the previous one; the rerun reads the client state as of that round and ends with
    the numbers of an uninterrupted run."""
    straight = run(setup, algo, rounds=4, checkpoint_every=1, fraction=0.5)
    work = tmp_path / "work"
    run(setup, algo, work_dir=work, rounds=4, checkpoint_every=1, fraction=0.5)
    clients = sorted(p.name for p in (work / "clients").iterdir())
    assert clients and all(len(list((work / "clients" / c).glob("r*.pt"))) <= 2 for c in clients)
    ckpt = work / "checkpoint.pt"
    ckpt.write_bytes(ckpt.read_bytes()[:100])  # torn: unreadable
    train, test, part, _ = setup
    log = io.StringIO()
    cfg = FLConfig(**(SMALL | dict(rounds=4, checkpoint_every=1, fraction=0.5)))
    again = Engine(cfg, build_algorithm(algo), train, test, part, 0, work_dir=work, progress=log).run()
    assert "is unreadable" in log.getvalue()
    assert f"resumed from {checkpoint.previous(ckpt)} at round 3" in log.getvalue()  # the file it resumed
    assert strip(again["history"]) == strip(straight["history"])


def test_code_change_is_never_resumed(setup, tmp_path, monkeypatch):
    """A checkpoint written by other code of the fed package is not resumed (issue 8: stale results)."""
    from fed import identity

    run(setup, work_dir=tmp_path, checkpoint_every=1)
    monkeypatch.setattr(identity, "code_hash", lambda module: "edited-code")
    train, test, part, _ = setup
    engine = Engine(
        FLConfig(**SMALL), build_algorithm("fedavg"), train, test, part, 0, work_dir=tmp_path, progress=None
    )
    assert not engine.try_resume()


def test_wall_time_accumulates_across_resumes(setup, tmp_path):
    first = run(setup, work_dir=tmp_path, checkpoint_every=1)
    resumed = run(setup, work_dir=tmp_path, checkpoint_every=1)  # resumes at the final round: nothing to do
    assert resumed["history"] == first["history"]  # no round trained again
    # the wall time is the checkpoint's (written during the first run) plus this segment's; no race between two
    # timings, which a shared CI machine could reorder
    before = resumed["wall_seconds"] - resumed["segment_seconds"]
    assert 0 < before <= first["wall_seconds"]


def test_history_csv_has_every_scalar_metric_and_leaves_gaps_empty(tmp_path):
    from fed.runner import write_history_csv

    history = [
        {"round": 1, "train_loss": 1.5, "local_steps": 9, "global_acc": 50.0, "per_class_acc": [1.0, 2.0]},
        {"round": 2, "train_loss": math.nan, "local_steps": 9, "zsdg_calls": 3},
    ]
    write_history_csv(history, tmp_path / "h.csv")
    lines = (tmp_path / "h.csv").read_text().splitlines()
    assert lines == ["round,train_loss,local_steps,global_acc,zsdg_calls", "1,1.5,9,50.0,", "2,,9,,3"]
    df = pd.read_csv(tmp_path / "h.csv")
    assert df.train_loss.isna().tolist() == [False, True] and df.zsdg_calls.tolist()[1] == 3


def test_a_truncated_partition_or_warm_start_is_an_error_naming_the_file_and_the_fix(setup, synthetic_root, tmp_path):
    """A job killed while writing (or a copy cut short) leaves a truncated file: the error names it and says how to
    recover, instead of a bare JSONDecodeError or a zip-archive error from torch."""
    import re

    from fed.config import MethodSpec
    from fed.runner import make_engine

    train, test, part, part_path = setup
    torn = tmp_path / "seed0.json"
    torn.write_text(part_path.read_text()[:200])
    with pytest.raises(ValueError, match=rf"partition file {re.escape(str(torn))} is not valid JSON .* delete it and"):
        make_engine(FLConfig(**SMALL), MethodSpec("fedavg", "fedavg"), "synthetic", synthetic_root, torn, 0)
    run(setup, work_dir=tmp_path / "prefix", rounds=1, checkpoint_every=1)
    warm = tmp_path / "fedavg_prefix-rounds1.pt"
    warm.write_bytes((tmp_path / "prefix" / "checkpoint.pt").read_bytes()[:100])
    engine = Engine(
        FLConfig(**SMALL), build_algorithm("fedavg"), train, test, part, 0, progress=None, stages={"warm": warm}
    )
    with pytest.raises(RuntimeError, match=rf"warm start {re.escape(str(warm))} is unreadable .* delete it and rerun"):
        engine.run()
    from fed.runner import tuned  # a tuning stage's file: the cell reads the chosen point from it

    tuning = tmp_path / "tuning-methodfedprox.pt"
    torch.save({"chosen": {"mu": 0.1}, "scores": [{"mu": 0.1, "diverged": False}], "tune": {"grid": {}}}, tuning)
    assert tuned(MethodSpec("fedprox", "fedprox"), {"tuning": tuning})[0].params == {"mu": 0.1}
    tuning.write_bytes(tuning.read_bytes()[:100])
    with pytest.raises(RuntimeError, match=rf"tuning stage {re.escape(str(tuning))} is unreadable .* delete it and"):
        tuned(MethodSpec("fedprox", "fedprox"), {"tuning": tuning})


def test_a_cell_whose_partition_was_cut_short_comes_back_from_its_checkpoint_untrained(
    setup, synthetic_root, tmp_path, monkeypatch
):
    """``run_cell`` reads the partition for the cell's record before ``make_engine`` does: a truncated file is the
    same error naming it and the fix there, not a bare JSONDecodeError. Snakemake deletes a failed job's outputs;
    once the partition is remade, the rerun comes back from the final checkpoint in the work dir, training nothing."""
    import re

    from fed import engine as engine_module
    from fed.config import MethodSpec
    from fed.runner import run_cell

    part, out, text = tmp_path / "seed0.json", tmp_path / "out", setup[3].read_text()
    part.write_text(text)

    def cell() -> str:
        log, cfg = io.StringIO(), FLConfig(**(SMALL | {"checkpoint_every": 1}))
        run_cell(
            cfg, MethodSpec("fedavg", "fedavg"), "synthetic", synthetic_root, part, 0, out, tmp_path / "w", progress=log
        )
        return log.getvalue()

    cell()
    first = json.loads((out / "metrics.json").read_text())
    for name in ("metrics.json", "history.csv", "model.pt"):  # what Snakemake removes after a failed job
        (out / name).unlink()
    part.write_text(text[:200])
    with pytest.raises(ValueError, match=rf"partition file {re.escape(str(part))} is not valid JSON .* delete it and"):
        cell()
    part.write_text(text)  # the partition rule remakes it (deterministic)
    monkeypatch.setattr(engine_module, "run_round", lambda *args: pytest.fail("a round was trained again"))
    assert f"at round {SMALL['rounds']}" in cell()
    again = json.loads((out / "metrics.json").read_text())
    assert again["history"] == first["history"] and (out / "model.pt").exists()


def test_cuda_s_kernel_choice_is_the_preset_s_and_float32_stays_full_either_way():
    """``deterministic`` (on CUDA): true sets deterministic kernels, false lets cuDNN autotune; TF32 is off in both
    (it rounds products to 10-bit mantissas, beyond rounding). The settings are global: restored after."""
    from fed.device import reproducible_cuda

    saved = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
             torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark, torch.backends.cudnn.allow_tf32,
             torch.backends.cuda.matmul.allow_tf32)  # fmt: skip
    try:
        for deterministic in (True, False):
            torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = True
            reproducible_cuda(deterministic)
            assert torch.are_deterministic_algorithms_enabled() is deterministic
            assert torch.backends.cudnn.deterministic is deterministic
            assert torch.backends.cudnn.benchmark is not deterministic
            assert not torch.backends.cudnn.allow_tf32 and not torch.backends.cuda.matmul.allow_tf32
    finally:
        torch.use_deterministic_algorithms(saved[0], warn_only=saved[1])
        (torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark, torch.backends.cudnn.allow_tf32,
         torch.backends.cuda.matmul.allow_tf32) = saved[2:]  # fmt: skip


def test_unit_activity_counts_positive_outputs_and_units_that_never_fire_by_hand():
    """unit_activity (fed.reporting.activity): a linear layer's four neurons and a convolution's two channels, over
    inputs split into chunks, against counts made by hand."""
    from fed.reporting.activity import unit_activity

    linear = torch.nn.Linear(2, 4)
    with torch.no_grad():
        linear.weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, -1.0], [0.0, 0.0]]))
        linear.bias.copy_(torch.tensor([0.0, 0.0, 0.0, -1.0]))  # neuron 3 is never positive: dead
    x = torch.tensor([[1.0, 2.0], [-1.0, 1.0], [2.0, -3.0]])
    # pre-activations: [1, 2, -3, -1], [-1, 1, 0, -1], [2, -3, 1, -1]: 5 of 12 positive; neurons 0, 1, 2 fire
    (row,) = unit_activity(torch.nn.Sequential(linear, torch.nn.ReLU()), x, batch=2)
    assert row == {"layer": "1", "units": 4, "active": 5 / 12, "dead": 0.25}

    conv = torch.nn.Conv2d(1, 2, 1, bias=False)
    with torch.no_grad():
        conv.weight.copy_(torch.tensor([1.0, -1.0]).view(2, 1, 1, 1))
    images = torch.tensor([[[[1.0, 2.0], [0.0, 3.0]]], [[[4.0, 0.0], [5.0, 6.0]]]])  # 6 of 8 pixels positive
    net = torch.nn.Sequential(conv, torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(8, 3), torch.nn.ReLU())
    first, second = unit_activity(net, images, batch=1)
    assert first == {"layer": "1", "units": 2, "active": 6 / 16, "dead": 0.5}  # channel 1 is −x ≤ 0 everywhere
    assert second["layer"] == "4" and second["units"] == 3


def test_the_active_units_script_reads_a_cell_it_finds_by_its_directory(setup, synthetic_root, tmp_path):
    """scripts/active_units.py rebuilds a finished cell's model from its metrics.json and reports each ReLU."""
    from conftest import REPO

    from fed.config import MethodSpec
    from fed.reporting.zsdg_figures import load_cell_model
    from fed.runner import run_cell

    out = tmp_path / "cell"
    cfg = FLConfig(**SMALL)
    run_cell(cfg, MethodSpec("fedavg", "fedavg"), "synthetic", synthetic_root, setup[3], 0, out, tmp_path / "w")
    script = [sys.executable, str(REPO / "scripts/active_units.py"), str(out), "--data-root", str(synthetic_root)]
    text = subprocess.run(script, capture_output=True, text=True, check=True).stdout
    assert text.startswith(f"{out}: fedavg, ") and "predicted per class [" in text
    model, _ = load_cell_model(out / "metrics.json", out / "model.pt")
    assert text.count(" units  active ") == sum(isinstance(m, torch.nn.ReLU) for m in model.modules()) > 0


def test_the_init_setting_draws_the_run_s_first_global_model(setup):
    """``init: xavier_relu`` (FedDPMS' code) re-draws the initial model's Conv2d and Linear weights from the run's
    own stream (the same seed, the same model); its biases and BatchNorm stay PyTorch's, as under ``init: torch``."""
    from fed.models import initialise

    train, test, part, _ = setup

    def first(init, seed=0):
        cfg = FLConfig(**SMALL, model="cnn_dpms_fmnist", init=init)
        return Engine(cfg, build_algorithm("fedavg"), train, test, part, seed, progress=None).ctx.global_state

    torch_init, xavier = first("torch"), first("xavier_relu")
    assert all(torch.equal(v, first("xavier_relu")[k]) for k, v in xavier.items())
    assert not torch.equal(xavier["body.0.0.weight"], first("xavier_relu", seed=1)["body.0.0.weight"])
    engine = Engine(
        FLConfig(**SMALL, model="cnn_dpms_fmnist"), build_algorithm("fedavg"), train, test, part, 0, progress=None
    )
    initialise(engine.ctx.model, "xavier_relu", engine.ctx.rng("init_weights"))
    assert all(torch.equal(v, xavier[k]) for k, v in engine.ctx.model.state_dict().items())
    assert {k for k in xavier if not torch.equal(xavier[k], torch_init[k])} == {
        k for k in xavier if k.endswith("weight") and xavier[k].dim() > 1
    }

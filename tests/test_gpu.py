"""On a CUDA machine (skipped elsewhere, CI included): every algorithm trains a small cell on the GPU, its
preparatory stages included, and the GPU cell agrees with the same cell on the CPU: the same clients, the same
first-round losses to float tolerance, final accuracies within a few test images. Run it where a GPU is:
``python -m pytest -q -m gpu``."""

import json

import pytest
import torch

from fed.algorithms import ALGORITHMS, build_algorithm
from fed.config import FLConfig, MethodSpec
from fed.data.datasets import load_dataset, load_labels
from fed.data.partition import make_partition
from fed.engine import Engine
from fed.leakage import audit
from fed.models import build_model
from fed.runner import run_cell, run_stage
from fed.zsdg import ZSDGConfig, zsdg

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

ZSDG = {"start_round": 2, "zsdg": {"iterations": 5, "per_class": 2}}
# the model, small parameters and settings where the defaults do not fit (everything else: cnn_mnist, SGD 0.01)
SETTINGS = {
    "fedzdac": ("cnn_mnist", ZSDG, {}),
    "fedzdas": ("cnn_mnist", ZSDG, {}),
    "dafl": ("cnn_dafl", {"gamma": 0.1, "gan": {"rounds": 1, "batch_size": 16, "width": 4}}, {}),
    "feddpms": (
        "cnn_dpms_fmnist",
        {"preliminary_rounds": 1, "quota": 20, "max_attempts": 200},
        {"optimizer": "adam", "lr": 1e-3},  # the slides' optimiser; SGD 0.01 on the VAE's summed BCE diverges
    ),
    "flea": ("audionet", {}, {"optimizer": "adam", "lr": 1e-3}),
}


@pytest.fixture(scope="module")
def partition_file(synthetic_root, tmp_path_factory):
    path = tmp_path_factory.mktemp("gpu") / "part.json"
    labels = load_labels("synthetic", synthetic_root)
    path.write_text(json.dumps(make_partition(labels, "label_quantity", 4, seed=0, k=2)))
    return path


def small(name, device, **overrides):
    """(config, parameters) of a small run of ``name`` on ``device``: SETTINGS' model and settings where it has them."""
    model, params, settings = SETTINGS.get(name, ("cnn_mnist", {}, {}))
    base = {**dict(num_clients=4, fraction=0.5, rounds=3, local_epochs=1, batch_size=16, lr=0.01), **overrides}
    return FLConfig(**{**base, **settings}, model=model, device=device), params


def cell(name, device, root, partition_file, tmp, params=None):
    cfg, default = small(name, device)
    params = default if params is None else params
    spec = MethodSpec(name, name, params)
    stages = {}
    for key, stage in build_algorithm(name, **params).stages().items():
        stages[key] = tmp / f"{device}-{key}.pt"
        run_stage(stage, cfg, "synthetic", root, partition_file, 0, stages[key], tmp / f"{device}-w", progress=None)
    return run_cell(cfg, spec, "synthetic", root, partition_file, 0, tmp / device, progress=None, stages=stages)


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_every_algorithm_trains_on_the_gpu_as_on_the_cpu(name, synthetic_root, partition_file, tmp_path):
    gpu = cell(name, "cuda", synthetic_root, partition_file, tmp_path)
    cpu = cell(name, "cpu", synthetic_root, partition_file, tmp_path)
    assert gpu["device"].startswith("cuda") and not gpu["diverged"] and not cpu["diverged"]
    assert not any(v.is_cuda for v in torch.load(tmp_path / "cuda" / "model.pt").values())  # readable anywhere
    first_gpu, first_cpu = gpu["history"][0], cpu["history"][0]
    assert first_gpu["local_steps"] == first_cpu["local_steps"]  # the same clients, the same data
    for key in ("train_loss", "loss"):
        if key in first_cpu:
            assert first_gpu[key] == pytest.approx(first_cpu[key], rel=1e-3, abs=1e-4), key
    assert gpu["last"]["global_acc"] == pytest.approx(cpu["last"]["global_acc"], abs=2.0)  # 200 test images


def test_zsdg_inverts_a_gpu_model_on_its_device():
    """Called without a device (as the leakage audit's model inversion calls it), ZSDG generates where the model is."""
    model = build_model("cnn_mnist", 1, 10, 28).cuda()
    x, y, info = zsdg(model, 10, (1, 28, 28), ZSDGConfig(per_class=2, iterations=2), torch.Generator().manual_seed(0))
    assert x.is_cuda and y.is_cuda and x.shape == (20, 1, 28, 28) and torch.isfinite(x).all()


@pytest.mark.parametrize("noise", ["calibrated", "code"])
def test_feddpms_shares_decodes_and_trains_on_the_gpu_as_on_the_cpu(noise, synthetic_root, tmp_path, accept_all):
    """Stage II on CUDA: noisy means drawn (both ways of forming a class's mean), matched, decoded by D̄ and trained on.
    The cell above shares nothing (after its one Stage I round no noisy mean passes the classifier); here every
    one is kept (``accept_all``, as in tests/test_feddpms.py), on a Dirichlet federation where receivers get some."""
    part = tmp_path / "dirichlet.json"
    labels = load_labels("synthetic", synthetic_root)
    part.write_text(json.dumps(make_partition(labels, "dirichlet", 4, 0, 0.0, beta=0.3)))
    params = {**SETTINGS["feddpms"][1], "noise": noise, "noise_multiplier": 4.0 if noise == "calibrated" else 0.5}
    gpu, cpu = (cell("feddpms", device, synthetic_root, part, tmp_path, params) for device in ("cuda", "cpu"))
    shared = [next(row for row in run["history"] if "dpms_received" in row) for run in (gpu, cpu)]
    assert sum(shared[0]["dpms_received"]) > 0
    for key in ("dpms_donor", "dpms_uploaded", "dpms_received"):
        assert shared[0][key] == shared[1][key], key
    assert not gpu["diverged"] and gpu["last"]["global_acc"] == pytest.approx(cpu["last"]["global_acc"], abs=2.0)


@pytest.mark.parametrize("name", ["fedavg", "feddata", "flea"])
def test_the_leakage_audit_runs_on_the_gpu_as_on_the_cpu(name, synthetic_root, partition_file):
    """The privacy ledger's audit (fed.leakage) of a cell trained on CUDA: raw samples (FedData), FLea's features
    through its attacker's decoder, and every model's inversion (ZSDG from the seeded CPU stream). The same artifacts
    are audited as on the CPU, at nearly the same rates (the GPU's images differ in rounding)."""
    out = {}
    for device in ("cuda", "cpu"):  # each run loads its own data: an engine may move it to its device
        train, test = (load_dataset("synthetic", synthetic_root, split) for split in ("train", "test"))
        partition = json.loads(partition_file.read_text())
        cfg, params = small(name, device, fraction=1.0, rounds=1)
        params = {**params, "share_fraction": 0.3} if name == "feddata" else params
        engine = Engine(cfg, build_algorithm(name, **params), train, test, partition, 0, progress=None)
        engine.run()
        reconstruction = {"samples": 100, "epochs": 1, "lr": 1e-3, "optimizer": "adam", "kind": "code"}
        out[device] = audit(engine, engine.ctx.global_state, {"per_class": 2, "iterations": 3}, reconstruction)
    gpu, cpu = out["cuda"]["artifacts"], out["cpu"]["artifacts"]
    kinds = {"fedavg": set(), "feddata": {"raw_samples"}, "flea": {"reconstructed_features"}}[name]
    assert set(gpu) == set(cpu) == kinds | {"model_inversion"}
    for kind in gpu:
        assert (gpu[kind]["n"], gpu[kind]["audited"]) == (cpu[kind]["n"], cpu[kind]["audited"]), kind
        assert gpu[kind]["closer_to_train"] == pytest.approx(cpu[kind]["closer_to_train"], abs=0.15), kind
    assert gpu.get("raw_samples", {}).get("leakage", 1.0) == 1.0


@pytest.mark.parametrize("mode", ["ghost", "hooks"])
def test_a_dp_cgan_on_the_gpu_is_the_cpu_s_draw(mode):
    """DA-FL's PSG takes every random draw on the CPU (fed.dpgan.train_psg), DP-SGD's noise included: on CUDA it
    takes the same steps, spends the same ε and ends at the CPU's generator up to kernel rounding. In float64: Adam
    divides each gradient by its own size, so in float32 a rounding-size change anywhere moves the generator by
    ≈ lr (a relative change of 1e-7 in the images moves it 3.4e-4 on one CPU; the H200 against the CPU: 7.1e-4, which
    failed this test's earlier float32 tolerance), while in float64 the same change moves it 1.3e-12."""
    from fed.dpgan import PSGSettings, train_psg

    torch.manual_seed(1)
    x, y = torch.rand(64, 1, 32, 32, dtype=torch.float64) * 2 - 1, torch.randint(3, (64,))
    settings = PSGSettings(rounds=2, batch_size=16, width=4, grad_sample_mode=mode)
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)  # the GAN's weights and every draw in float64
    try:
        gpu, cpu = (train_psg(x, y, 3, settings, seed=4, device=device) for device in ("cuda", "cpu"))
    finally:
        torch.set_default_dtype(default)
    assert (gpu.steps, gpu.epsilon) == (cpu.steps, cpu.epsilon) and gpu.steps > 1
    for name, tensor in cpu.generator.items():
        assert not gpu.generator[name].is_cuda and tensor.dtype == torch.float64
        torch.testing.assert_close(gpu.generator[name], tensor, rtol=1e-7, atol=1e-9, msg=name)


def test_campaign_status_creates_no_cuda_context(tmp_path):
    """``fed campaign --status`` beside a running campaign reads a GPU cell's checkpoint and this machine's kind (its
    GPU's name, which the plan's paces are weighed by) without creating a CUDA context: it takes no GPU memory, and
    cannot fail on a GPU in exclusive-process mode. Read in a fresh process by the driver's primary-context state."""
    import dataclasses
    import subprocess
    import sys

    from fed import campaign

    pytest.importorskip("cuda.bindings.driver")  # the CUDA driver's Python bindings (torch's cuda-bindings)
    work = tmp_path / "work/c"
    work.mkdir(parents=True)
    history = [{"round": r, "global_acc": 50.0, "seconds": 10.0} for r in (1, 2)]
    torch.save({"round": 2, "global_state": {"w": torch.ones(3, device="cuda")}, "history": history,
                "wall_seconds": 20.0}, work / "checkpoint.pt")  # fmt: skip
    job = {"kind": "cell", "out": str(tmp_path / "runs/c/metrics.json"), "rank": [0, 0, 1], "needs": [],
           "label": "c", "args": {"work_dir": str(work), "preset": dataclasses.asdict(FLConfig(rounds=4)),
                                  "dataset": "synthetic", "tracking": {"tags": {"algorithm": "fedavg"}}}}  # fmt: skip
    pace = {"cell": "x", "pace": 9.0, "rounds": 4, "machine": "cuda some GPU", "planned": True}
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": campaign.PLAN_VERSION, "jobs": [job], "paces": {"fedavg": [pace]}}))
    code = f"""
from cuda.bindings import driver
from fed import campaign
[row] = campaign.status(campaign.read_plan({str(plan)!r}))
assert row["progress"].startswith("round 2/4"), row
driver.cuInit(0)
err, device = driver.cuDeviceGet(0)
err, flags, active = driver.cuDevicePrimaryCtxGetState(device)
print(int(err), int(active))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["0", "0"], out  # CUDA_SUCCESS, and no primary context is active

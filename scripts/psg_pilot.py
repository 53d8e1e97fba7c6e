"""A pilot before a whole DA-FL GAN stage: some clients' PSG exactly as a planned ``dp_cgan`` stage trains them — the
same data, the same seeded streams (initial weights, Poisson batches, noise) — with GAN settings changed, so a
client's pilot and its stage differ by the change only. Read the result with ``scripts/gan_fidelity.py OUT_DIR``.

    python -m fed campaign config/dafl_fmnist.yaml+config/rerun_committed.yaml --method dafl_gamma0.05 \\
        --write-plan gan.json
    python scripts/psg_pilot.py gan.json --partition 2-label --client 7 --client 8 \\
        --set generator_loss=non_saturating -o results/pilots/2-label-non_saturating

A pilot's clients keep their state as a stage's do (``fed.dpgan.STATE_EVERY``): run it again and each resumes.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

import torch
import yaml

from fed.config import FLConfig, MethodSpec
from fed.dpgan import PSGSettings, client_request
from fed.gan_stage import train_clients
from fed.runner import make_engine
from fed.stages import Stage


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("plan", type=Path, help="a campaign plan (fed campaign --write-plan) with the dp_cgan stage")
    parser.add_argument("--partition", required=True, help="the stage's partition (e.g. 1-label) or its file")
    parser.add_argument("--client", type=int, action="append", required=True, help="a client to train (repeatable)")
    parser.add_argument("--set", action="append", default=[], help="GAN setting KEY=YAML_VALUE (repeatable)")
    parser.add_argument("-o", "--out", type=Path, required=True, help="the pilot's directory (client{k}.pt files)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    jobs = [
        j["args"]
        for j in json.loads(args.plan.read_text())["jobs"]
        if j["kind"] == "stage" and j["args"]["stage"]["kind"] == "dp_cgan"
        and args.partition in (Path(j["args"]["partition_file"]).parent.name, j["args"]["partition_file"])
    ]  # fmt: skip
    if len(jobs) != 1:
        raise SystemExit(f"{args.plan}: {len(jobs)} dp_cgan stages on partition {args.partition!r}; need one")
    a = jobs[0]
    changes = dict(kv.split("=", 1) for kv in args.set)
    params = a["stage"]["params"] | {k: yaml.safe_load(v) for k, v in changes.items()}
    settings = PSGSettings.from_params(params)
    stage = Stage.of("dp_cgan", **a["stage"]["params"])
    cfg = FLConfig.from_preset(a["preset"], a["dataset"]).with_protocol(stage.protocol, stage.key)
    args.out.mkdir(parents=True, exist_ok=True)
    engine = make_engine(
        cfg, MethodSpec("fedavg", "fedavg"), a["dataset"], a["data_root"], a["partition_file"], a["seed"],
        work_dir=args.out / "engine", progress=None,
    )  # fmt: skip
    pilot = {"stage": a["out"], "changes": changes, "settings": dataclasses.asdict(settings)}
    (args.out / "pilot.json").write_text(json.dumps(pilot, indent=1))
    todo = [k for k in args.client if not (args.out / f"client{k}.pt").exists()]
    print(f"{a['out']} with {changes}: clients {todo} to train", flush=True)

    def request(k: int) -> dict:
        return client_request(engine.ctx, a["dataset"], settings, k, args.out)

    train_clients(todo, request, args.out, 1, sys.stdout)


if __name__ == "__main__":
    main()

"""``fed`` command line, for use without Snakemake: prepare data, make a partition, run one cell."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import yaml


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="fed", description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare", help="cache a dataset as tensors (download, offline import or synthetic)")
    p.add_argument("dataset")
    p.add_argument("--root", default="data")
    p.add_argument("--no-download", action="store_true")
    p = sub.add_parser("partition", help="partition a prepared dataset's training set")
    p.add_argument("dataset")
    p.add_argument("scheme")
    p.add_argument("--root", default="data")
    p.add_argument("--clients", type=int, default=100)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--param", action="append", default=[], help="scheme parameter KEY=YAML_VALUE")
    p.add_argument("-o", "--out", required=True)
    p = sub.add_parser("run", help="run one cell")
    p.add_argument("dataset")
    p.add_argument("partition_file")
    p.add_argument("method", help="algorithm name")
    p.add_argument("--root", default="data")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--preset", help="YAML file of FL settings (FLConfig fields)")
    p.add_argument("--set", action="append", default=[], help="FL setting KEY=YAML_VALUE")
    p.add_argument("--param", action="append", default=[], help="method parameter KEY=YAML_VALUE")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("-o", "--out", required=True)
    args = ap.parse_args(argv)

    if args.cmd == "prepare":
        from fed.data.datasets import prepare

        print(prepare(args.dataset, args.root, download=not args.no_download))
    elif args.cmd == "partition":
        from fed.data.datasets import load_labels
        from fed.data.partition import make_partition

        part = make_partition(
            load_labels(args.dataset, args.root), args.scheme, args.clients, args.seed, **_kv(args.param)
        )
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(part))
    else:
        from fed.config import FLConfig, MethodSpec
        from fed.runner import run_cell

        preset = yaml.safe_load(Path(args.preset).read_text()) if args.preset else {}
        cfg = FLConfig.from_preset(preset | _kv(args.set), args.dataset)
        method = MethodSpec(args.method, args.method, _kv(args.param))
        rec = run_cell(
            cfg,
            method,
            args.dataset,
            args.root,
            args.partition_file,
            args.seed,
            args.out,
            work_dir=Path(args.out) / "work",
            threads=args.threads,
        )
        print(json.dumps(rec["last"] | {"diverged": rec["diverged"]}, default=str))


def _kv(pairs: list[str]) -> dict:
    return {k: yaml.safe_load(v) for k, v in (p.split("=", 1) for p in pairs)}


if __name__ == "__main__":
    main()

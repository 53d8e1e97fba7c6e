"""``fed`` command line, for use without Snakemake: check a config, prepare data, make a partition, run one cell, run
the cells a config still misses (campaign), export finished cells to commit, migrate an older tree's params."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import yaml


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="fed", description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("check", help="check config.yaml with overlays as the workflow will (YAML errors with line)")
    p.add_argument("configfiles", nargs="*", help="overlays, as for snakemake --configfile")
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
    p.add_argument(
        "--preset",
        required=True,
        help="a preset of the repository's config (e.g. fedzda; base chains resolved) or a YAML file "
        "of FLConfig fields; --set overrides single keys",
    )
    p.add_argument("--set", action="append", default=[], help="FL setting KEY=YAML_VALUE")
    p.add_argument("--param", action="append", default=[], help="method parameter KEY=YAML_VALUE")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("-o", "--out", required=True)
    p = sub.add_parser(
        "export-reference",
        help="copy the finished cells' metrics.json and history.csv (never weights) to a reference folder to commit",
    )
    p.add_argument("results_dir", help="a workflow's results_dir (its runs/ are read)")
    p.add_argument("reference_dir", help="e.g. reference/fmnist (set as reference_dir in the config)")
    p.add_argument(
        "--cell",
        action="append",
        help="only this cell, as a path under runs/ (e.g. dafl/fmnist/1-label/fedavg/seed0; repeatable)",
    )
    p = sub.add_parser(
        "analyse",
        help="every analysis of the head-to-head protocol on a leaderboard's cells (docs/headtohead-protocol.md)",
    )
    p.add_argument("configs", nargs="+", help="overlays, as for snakemake --configfile")
    p.add_argument("--table", required=True, help="a leaderboard table of the config")
    p.add_argument("--metric", action="append", help="only this metric (repeatable; default: the table's metrics)")
    p.add_argument("-o", "--out", help="also write every analysis, p and statistic as CSV (the rule's CSV)")
    p = sub.add_parser(
        "campaign",
        help="run the cells the configs still miss, most valuable first, for N minutes (fed.campaign)",
        description="Plan from configs (needs Snakemake's config checks) or run a plan written elsewhere (needs only "
        "PyTorch): cells checkpoint at the deadline and the next call resumes them.",
    )
    p.add_argument("configs", nargs="*", help="configs in order of value; join overlays of one with '+'")
    p.add_argument("--table", action="append", help="only the cells of this table or figure (repeatable)")
    p.add_argument("--method", action="append", help="only this method's cells (repeatable)")
    p.add_argument("--partition", action="append", help="only the cells on this partition (repeatable)")
    p.add_argument("--minutes", type=float, default=60.0, help="when cells checkpoint and no job starts any more")
    p.add_argument("--jobs", type=int, default=1, help="jobs at once (on a GPU they share it)")
    p.add_argument("--threads", type=int, help="threads a job (default: the CPUs shared out)")
    p.add_argument("--write-plan", metavar="FILE", help="write the plan and stop (to run it on another machine)")
    p.add_argument("--plan", metavar="FILE", help="run this plan instead of planning")
    p.add_argument("--status", action="store_true", help="say where each job stands and what is left; run nothing")
    p.add_argument(
        "--export",
        action="store_true",
        help="copy each cell, once done, to its config's reference_dir, ready to commit (as fed export-reference)",
    )
    p = sub.add_parser(
        "migrate-params",
        help="record the params of jobs whose params changed only in key order, so they do not rerun",
        description="A tree built before the rules sorted their params' keys (2026-12-05) reads 'Params have "
        "changed' for jobs whose values did not change (fed.migrate). Without --apply: say what would change.",
    )
    p.add_argument("configfiles", nargs="*", help="overlays, as for snakemake --configfile")
    p.add_argument("-d", "--directory", default=".", help="the workflow's working directory (snakemake -d)")
    p.add_argument("--apply", action="store_true", help="keep the rewritten records (else every record is put back)")
    args = ap.parse_args(argv)

    if args.cmd == "check":
        try:
            warnings = check_files(args.configfiles)
        except ValueError as err:
            raise SystemExit(f"fed check: {err}") from None
        print("\n".join(["config ok", *warnings]))
    elif args.cmd == "prepare":
        from fed.data.datasets import prepare

        print(prepare(args.dataset, args.root, download=not args.no_download))
    elif args.cmd == "analyse":
        from fed.grid import Grid
        from fed.reporting import analyses

        try:
            grid = Grid.from_files(args.configs, _repo())
            if args.table not in grid.config["tables"]:
                raise ValueError(f"no table {args.table!r} in the config")
            runs, spec, protocol = analyses.table_runs(grid, args.table)
            if unknown := set(args.metric or ()) - set(spec["metrics"]):
                raise ValueError(f"table {args.table!r} has no metric {sorted(unknown)}; it has {spec['metrics']}")
            every, glances = analyses.board_analyses(runs, dict(spec, metrics=args.metric or spec["metrics"]), protocol)
        except ValueError as err:
            raise SystemExit(f"fed analyse: {err}") from None
        if args.out:
            every.to_csv(args.out, index=False)
        with pd_options():
            print("\n\n".join(f"{title}\n{frame.to_string(index=False)}" for title, frame in glances))
    elif args.cmd == "campaign":
        from fed import campaign

        if bool(args.plan) == bool(args.configs):
            ap.error("campaign: give configs to plan from, or --plan FILE, not both")
        if args.plan and (args.table or args.method or args.partition):
            ap.error("campaign: --table, --method and --partition narrow planning; --plan runs its file whole")
        try:
            configs = [c.split("+") for c in args.configs]
            todo = (
                campaign.read_plan(args.plan)
                if args.plan
                else campaign.plan(configs, _repo(), args.table, args.method, args.partition)
            )
            if lost := todo.get("unaudited"):
                print(f"{len(lost)} cells of audited tables have no audit, and their models are not here to audit "
                      f"(the first: {lost[0]}): their privacy and cost rows stay empty", file=sys.stderr)  # fmt: skip
            if args.status:
                print(campaign.describe(campaign.status(todo)))
                return
            if args.write_plan:
                campaign.write_plan(todo, args.write_plan)
                print(f"{len(todo['jobs'])} jobs planned in {args.write_plan}")
                return
            outcome = campaign.run(todo, args.minutes, args.jobs, args.threads, export=args.export)
        except ValueError as err:
            raise SystemExit(f"fed campaign: {err}") from None
        print(json.dumps(outcome, indent=1))
    elif args.cmd == "migrate-params":
        from fed.migrate import migrate

        try:
            configs = [str(Path(c).resolve()) for c in args.configfiles]
            outcome = migrate(_repo() / "Snakefile", Path(args.directory).resolve(), configs, apply=args.apply)
        except ValueError as err:
            raise SystemExit(f"fed migrate-params: {err}") from None
        done = "rewritten" if args.apply else "would be rewritten (run again with --apply)"
        for key, says in (
            ("migrated", f"params changed only in key order, their records {done}"),
            ("changed", "params changed in value (these rerun)"),
            ("unrecorded", "an output without a record file here, left alone"),
        ):
            print(f"{len(outcome[key])} jobs (by first output): {says}", *(f"  {f}" for f in outcome[key]), sep="\n")
    elif args.cmd == "export-reference":
        from fed.export import export_reference

        try:
            cells = export_reference(Path(args.results_dir), Path(args.reference_dir), args.cell)
        except ValueError as err:
            raise SystemExit(f"fed export-reference: {err}") from None
        print(f"{len(cells)} finished cells in {args.reference_dir}")
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
        from fed.data.datasets import DatasetUnavailableError
        from fed.data.partition import PartitionError
        from fed.runner import run_cell
        from fed.validate import parameter_errors

        try:
            cfg = FLConfig.from_preset(_preset(args.preset) | _kv(args.set), args.dataset, name=args.preset)
            if cfg.rounds < 1:
                raise ValueError(f"rounds={cfg.rounds}: a run needs at least one round")
            errors = parameter_errors(_algorithm(args.method), _kv(args.param))
            if errors:
                raise ValueError("; ".join(errors))
        except ValueError as err:
            ap.error(str(err))
        method = MethodSpec(args.method, args.method, _kv(args.param))
        try:
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
        except (PartitionError, DatasetUnavailableError) as err:  # inputs it cannot use, before any round
            ap.error(str(err))
        print(json.dumps(rec["last"] | {"diverged": rec["diverged"]}, default=str))


def pd_options():
    import pandas as pd

    return pd.option_context("display.width", 200, "display.max_rows", 500)


def _kv(pairs: list[str]) -> dict:
    if bad := [p for p in pairs if "=" not in p]:
        raise ValueError(f"expected KEY=VALUE, got {bad}")
    return {k: yaml.safe_load(v) for k, v in (p.split("=", 1) for p in pairs)}


def check_files(overlays: list[str]) -> list[str]:
    """The workflow's config (the checkout's config.yaml, the papers' files, then ``overlays``), validated by the
    schema and ``check_config``; raises ValueError naming the file (and line, for YAML errors) or every problem."""
    from fed.validate import checked_files

    return checked_files(overlays, _repo())[1]


def _repo() -> Path:
    repo = Path(__file__).resolve().parents[2]
    if not (repo / "config.yaml").is_file():
        raise ValueError("no config.yaml beside this installation of fed (use a checkout: pip install -e .)")
    return repo


def _preset(name: str) -> dict:
    """A YAML file of FLConfig fields, or a preset of the checkout's config.yaml and config/papers/*.yaml."""
    from fed.config import load_yaml, resolve_preset, with_papers

    if Path(name).is_file():
        return load_yaml(name)
    repo = _repo()
    config = with_papers(load_yaml(repo / "config.yaml"), repo / "config" / "papers")
    return resolve_preset(config.get("presets", {}), name)


def _algorithm(name: str):
    from fed.algorithms import ALGORITHMS

    if name not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {name!r}; valid choices: {sorted(ALGORITHMS)}")
    return ALGORITHMS[name]


if __name__ == "__main__":
    main()

"""Every job Snakemake would run, as JSON: rule, wildcards, inputs (in order, with their names), outputs, logs,
params (as Snakemake compares them: their repr) and threads, sorted. Two commits that print the same list plan
the same work — the check that a refactor of the workflow changed nothing (docs/architecture.md)::

    python scripts/dag_jobs.py --configfile config/quick.yaml > quick.json

Takes Snakemake's own arguments (a dry run with ``--forceall``: every job, whatever exists on disk).
"""

import json
import sys

import snakemake.api  # noqa: F401  (imports snakemake.workflow in the order it expects)
from snakemake.cli import main
from snakemake.workflow import Workflow


def print_jobs(self: Workflow) -> None:
    """Replaces ``snakemake --dag``'s printer: the DAG is built the same way, then listed job by job."""
    self._prepare_dag(forceall=self.dag_settings.forceall, ignore_incomplete=True, lock_warn_only=True)
    self._build_dag()
    jobs = [
        {
            "rule": job.rule.name,
            "wildcards": dict(job.wildcards),
            "input": list(map(str, job.input)),
            "input_names": sorted(job.input._names),
            "output": sorted(map(str, job.output)),
            "log": sorted(map(str, job.log)),
            "params": {k: repr(v) for k, v in job.params.items()},
            "threads": job.threads,
        }
        for job in self.dag.jobs
    ]
    jobs.sort(key=lambda j: (j["rule"], j["output"], j["input"]))
    print(json.dumps(jobs, indent=1, sort_keys=True))


if __name__ == "__main__":
    if {"-h", "--help"} & set(sys.argv[1:]):
        print(__doc__)
        sys.exit(0)
    Workflow.printdag = print_jobs
    sys.argv = ["snakemake", "--dag", "--forceall", *sys.argv[1:]]
    main()

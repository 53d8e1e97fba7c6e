# fedrepro — reproduce federated-learning-with-augmentation papers as one DAG:
# dataset × partition × method × seed cells, shared across the tables that need them.
from snakemake.utils import min_version

min_version("9.0")


configfile: f"{workflow.basedir}/config.yaml"  # also when run with --directory elsewhere


include: "workflow/rules/common.smk"


# `snakemake --report` opens on the summary: per paper, cells per verdict and the claims
report: summary_report_text()


include: "workflow/rules/data.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/tables.smk"
include: "workflow/rules/figures.smk"


# Seconds-long bookkeeping runs where snakemake runs, not through a cluster queue. prepare_data is among them:
# compute nodes often have no internet, the login node downloads the datasets.
localrules:
    prepare_data,
    partition,
    plot_partition,
    mlflow_init,
    mlflow_log,
    table,
    costs,
    claims,
    summary,


rule all:
    default_target: True
    input:
        GRID.table_outputs(),
        GRID.figure_outputs(),
        GRID.partition_figures(),
        GRID.tracking_outputs(),

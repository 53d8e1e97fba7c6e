rule prepare_data:
    output:
        f"{DATA}/{{dataset}}/tensors.pt",
    log:
        "logs/prepare_data/{dataset}.log",
    conda:
        "../../envs/fed.yaml"
    params:
        root=lambda w, output: str(Path(output[0]).parents[1]),
        download=CONFIG["download"],
        synthetic=canonical(CONFIG["synthetic"]),
    script:
        "../scripts/prepare_data.py"


rule partition:
    input:
        f"{DATA}/{{dataset}}/tensors.pt",
    output:
        "partitions/{preset}/{dataset}/{partition}/seed{seed}.json",
    log:
        "logs/partition/{preset}/{dataset}/{partition}/seed{seed}.log",
    conda:
        "../../envs/fed.yaml"
    params:
        spec=lambda w: canonical(CONFIG["partitions"][w.partition]),  # keys sorted, as the train rule's
        preset=lambda w: canonical(GRID.preset(w.preset)),
    script:
        "../scripts/partition.py"


rule plot_partition:
    input:
        "partitions/{preset}/{dataset}/{partition}/seed{seed}.json",
    output:
        report(
            f"{REPORTS}/figures/partitions/{{preset}}/{{dataset}}/{{partition}}/seed{{seed}}.png",
            caption="../report/partition.rst",
            category="Partitions",
            labels={
                "dataset": "{dataset}",
                "partition": "{partition}",
                "preset": "{preset}",
            },
        ),
    log:
        "logs/plot_partition/{preset}/{dataset}/{partition}/seed{seed}.log",
    conda:
        "../../envs/fed.yaml"
    params:
        code=script_code("plot_partition.py"),
    script:
        "../scripts/plot_partition.py"

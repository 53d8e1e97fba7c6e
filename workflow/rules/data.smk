rule prepare_data:
    output:
        f"{DATA}/{{dataset}}/tensors.pt",
    log:
        "logs/prepare_data/{dataset}.log",
    params:
        root=DATA,
        download=config["download"],
        synthetic=config["synthetic"],
    script:
        "../scripts/prepare_data.py"


rule partition:
    input:
        f"{DATA}/{{dataset}}/tensors.pt",
    output:
        "partitions/{preset}/{dataset}/{partition}/seed{seed}.json",
    params:
        spec=lambda w: config["partitions"][w.partition],
        preset=lambda w: preset(w.preset),
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
            labels={"dataset": "{dataset}", "partition": "{partition}", "preset": "{preset}"},
        ),
    script:
        "../scripts/plot_partition.py"

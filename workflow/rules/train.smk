rule mlflow_init:
    """Create the tracking store and one experiment per paper before training jobs fan out."""
    output:
        MLFLOW_READY,
    params:
        uri=TRACKING_URI,
        experiments=PAPERS,
    script:
        "../scripts/mlflow_init.py"


rule train:
    input:
        data=f"{DATA}/{{dataset}}/tensors.pt",
        partition="partitions/{preset}/{dataset}/{partition}/seed{seed}.json",
        store=MLFLOW_READY,
    output:
        metrics=f"{RESULTS}/runs/{{preset}}/{{dataset}}/{{partition}}/{{method}}/seed{{seed}}/metrics.json",
        history=f"{RESULTS}/runs/{{preset}}/{{dataset}}/{{partition}}/{{method}}/seed{{seed}}/history.csv",
    log:
        "logs/train/{preset}/{dataset}/{partition}/{method}/seed{seed}.log",
    params:
        preset=lambda w: preset(w.preset),
        method=lambda w: config["methods"][w.method],
        data_root=DATA,
        # checkpoints live outside the declared outputs, so a killed job resumes instead of restarting
        work_dir=f"{RESULTS}/work/{{preset}}/{{dataset}}/{{partition}}/{{method}}/seed{{seed}}",
        tracking=lambda w: {
            "uri": TRACKING_URI,
            "experiment": CELL_PAPER[(w.preset, w.dataset, w.partition, w.method, int(w.seed))],
            "tags": {
                "paper": CELL_PAPER[(w.preset, w.dataset, w.partition, w.method, int(w.seed))],
                "preset": w.preset,
                "dataset": w.dataset,
                "partition": w.partition,
                "method": w.method,
                "algorithm": algorithm(w.method),
                "seed": w.seed,
            },
        },
    threads: config["train_threads"]
    resources:
        mem_mb=config["train_mem_mb"],
        runtime=config["train_runtime_min"],
        gpu=config["gpu_per_job"],
    script:
        "../scripts/train.py"

rule mlflow_init:
    """Create the tracking store and a paper's experiment before its training jobs fan out."""
    output:
        MLFLOW_READY,
    log:
        "logs/mlflow_init/{paper}.log",
    conda:
        "../../envs/fed.yaml"
    params:
        uri=TRACKING_URI,
    script:
        "../scripts/mlflow_init.py"


rule mlflow_log:
    """tracking_mode: batch — log a paper's trained cells to MLflow in one job once they are finished (a training
    job then skips MLflow's start-up); a cell logged before with the same metrics is left as it is.
    """
    input:
        store=MLFLOW_READY,
        metrics=lambda w: GRID.trained_cells(w.paper),
    output:
        f"{RESULTS}/mlflow/{{paper}}.logged.tsv",
    log:
        "logs/mlflow_log/{paper}.log",
    conda:
        "../../envs/fed.yaml"
    params:
        uri=TRACKING_URI,
    script:
        "../scripts/mlflow_log.py"


rule stage:
    """A preparatory stage (fed.stages): e.g. FedAvg up to round r, the shared prefix of every run that starts
    augmenting at round r + 1. Computed once per (preset, dataset, partition, seed, stage).
    """
    input:
        unpack(stage_inputs),
    output:
        f"{RESULTS}/stages/{STAGE}.pt",
    log:
        "logs/stage/{preset}/{dataset}/{partition}/seed{seed}/{stage}.log",
    benchmark:  # wall time, peak memory (max RSS), CPU time of the job: the cost tables' preparatory stages
        f"{RESULTS}/stages/{STAGE}.benchmark.tsv"
    conda:
        "../../envs/fed.yaml"
    threads: CONFIG["train_threads"]
    resources:
        mem_mb=CONFIG["train_mem_mb"],
        runtime=CONFIG["train_runtime_min"],
        gpu=CONFIG["gpu_per_job"],
    params:
        # plain data, not a fed.stages.Stage: unpickling a fed object would import `fed` before the script puts
        # this checkout's src/ first on sys.path (another checkout's editable install would win)
        stage=stage_record,
        # the method a tuning stage tunes (its spec with `tune:`), else None
        method_name=lambda w: GRID.stage_method(key(w), w.stage),
        method=lambda w: canonical(
            CONFIG["methods"].get(GRID.stage_method(key(w), w.stage))
        ),
        preset=lambda w: canonical(GRID.preset(w.preset)),
        data_root=lambda w, input: str(Path(input.data).parents[1]),
        code=stage_code,  # fed.identity: an edit to the code it runs reruns it, a report edit does not
        work_dir=f"{RESULTS}/work/stages/{STAGE}",
    script:
        "../scripts/stage.py"


rule train:
    input:
        unpack(train_inputs),
    output:
        metrics=f"{CELL}/metrics.json",
        history=f"{CELL}/history.csv",
        model=f"{CELL}/model.pt",
    log:
        "logs/train/{preset}/{dataset}/{partition}/{method}/seed{seed}.log",
    benchmark:  # wall time, peak memory (max RSS), CPU time of the job: the cost tables' peak memory
        f"{CELL}/benchmark.tsv"
    conda:
        "../../envs/fed.yaml"
    threads: CONFIG["train_threads"]
    resources:
        mem_mb=CONFIG["train_mem_mb"],
        runtime=CONFIG["train_runtime_min"],
        gpu=CONFIG["gpu_per_job"],
    params:
        # canonical (keys sorted): Snakemake compares params by their repr, so reordering a method's or preset's
        # keys in the YAML would rerun every cell of it
        preset=lambda w: canonical(GRID.preset(w.preset)),
        method=lambda w: canonical(CONFIG["methods"][w.method]),
        data_root=lambda w, input: str(Path(input.data).parents[1]),
        code=lambda w: algorithm_code_hash(GRID.algorithm(w.method)),  # fed.identity: its method's and the engine's
        # checkpoints live outside the declared outputs, so a killed job resumes instead of restarting
        work_dir=f"{RESULTS}/work/{{preset}}/{{dataset}}/{{partition}}/{{method}}/seed{{seed}}",
        tracking=train_tracking,
    script:
        "../scripts/train.py"


rule audit:
    """What a finished cell's method shared, re-derived by its own code with the run's seeds, and its final model's
    inversion, each against its owner's training and held-out records (fed.leakage); with the peak memory of its
    train job and of its stages' jobs (their benchmarks). For tables with ``audit: true``; committed with the cell.
    """
    input:
        unpack(train_inputs),
        metrics=f"{CELL}/metrics.json",
        model=f"{CELL}/model.pt",
        benchmark=f"{CELL}/benchmark.tsv",
    output:
        f"{CELL}/audit.json",
    log:
        "logs/audit/{preset}/{dataset}/{partition}/{method}/seed{seed}.log",
    conda:
        "../../envs/fed.yaml"
    threads: CONFIG["train_threads"]
    resources:
        mem_mb=CONFIG["train_mem_mb"],
    params:
        data_root=lambda w, input: str(Path(input.data).parents[1]),
        code=lambda w: [
            algorithm_code_hash(GRID.algorithm(w.method)),
            code_hash("fed.leakage"),
        ],
    script:
        "../scripts/audit.py"

rule table:
    """Mean ± std over seeds per cell, the paper's value beside it, and the difference."""
    input:
        lambda w: [
            cell_path(**c) for c in table_cells(config["tables"][TABLES[w.table]])
        ],
    output:
        csv=f"{REPORTS}/tables/{{table}}.csv",
        md=f"{REPORTS}/tables/{{table}}.md",
        html=report(
            f"{REPORTS}/tables/{{table}}.html",
            caption="../report/table.rst",
            category="Tables",
            subcategory=lambda w: config["tables"][TABLES[w.table]]["paper"],
        ),
    log:
        "logs/table/{table}.log",
    wildcard_constraints:
        table="|".join(TABLES) or "NONE",
    conda:
        "../../envs/fed.yaml"
    params:
        table=lambda w: config["tables"][TABLES[w.table]],
        preset=lambda w: preset(config["tables"][TABLES[w.table]]["preset"]),
        cells=lambda w: table_cells(config["tables"][TABLES[w.table]]),
        verdict=config["verdict"],
        sweeps=lambda w: {
            m: SWEEPS[m]
            for m in config["tables"][TABLES[w.table]]["methods"]
            if m in SWEEPS
        },
        implemented=lambda w: [
            m for m in config["methods"] if algorithm(m) in ALGORITHMS
        ],
    script:
        "../scripts/table.py"


rule costs:
    """Wall time and generation time of every method of a paper's tables, relative to FedAvg; and their privacy
    ledger (what left the clients, and the guarantees stated for it)."""
    input:
        lambda w: [cell_path(**c) for c in cost_cells(w.paper, w.preset)],
    output:
        csv=f"{REPORTS}/tables/{{paper}}/costs_{{preset}}.csv",
        md=f"{REPORTS}/tables/{{paper}}/costs_{{preset}}.md",
        html=report(
            f"{REPORTS}/tables/{{paper}}/costs_{{preset}}.html",
            caption="../report/costs.rst",
            category="Tables",
            subcategory="{paper}",
        ),
        privacy_csv=f"{REPORTS}/tables/{{paper}}/privacy_{{preset}}.csv",
        privacy_md=f"{REPORTS}/tables/{{paper}}/privacy_{{preset}}.md",
        privacy_html=report(
            f"{REPORTS}/tables/{{paper}}/privacy_{{preset}}.html",
            caption="../report/privacy.rst",
            category="Tables",
            subcategory="{paper}",
        ),
    log:
        "logs/costs/{paper}/{preset}.log",
    conda:
        "../../envs/fed.yaml"
    params:
        cells=lambda w: cost_cells(w.paper, w.preset),
    script:
        "../scripts/costs.py"


rule claims:
    """A paper's headline statements, each supported / contradicted / inconclusive by a test over seeds."""
    input:
        unpack(lambda w: claim_sources(w.paper)),
    output:
        csv=f"{REPORTS}/tables/{{paper}}/claims.csv",
        md=f"{REPORTS}/tables/{{paper}}/claims.md",
        html=report(
            f"{REPORTS}/tables/{{paper}}/claims.html",
            caption="../report/claims.rst",
            category="Summary",
            subcategory="{paper}",
        ),
    log:
        "logs/claims/{paper}.log",
    conda:
        "../../envs/fed.yaml"
    params:
        claims=lambda w: {
            n: c for n, c in config["claims"].items() if c["paper"] == w.paper
        },
        reductions=lambda w: {s: source_reduction(s) for s in claim_sources(w.paper)},
    script:
        "../scripts/claims.py"


rule summary:
    """The report's opening page: table cells per verdict, per paper and table, and every paper's claims."""
    input:
        tables=[f"{REPORTS}/tables/{t}.csv" for t in TABLES],
        claims=[f"{REPORTS}/tables/{p}/claims.csv" for p in sorted(CLAIM_PAPERS)],
    output:
        rst=f"{REPORTS}/summary.rst",
        md=f"{REPORTS}/summary.md",
        html=report(
            f"{REPORTS}/summary.html",
            caption="../report/summary.rst",
            category="Summary",
        ),
    log:
        "logs/summary.log",
    conda:
        "../../envs/fed.yaml"
    params:
        tables=list(TABLES),
        papers={t: config["tables"][name]["paper"] for t, name in TABLES.items()},
        claim_papers=sorted(CLAIM_PAPERS),
    script:
        "../scripts/summary.py"

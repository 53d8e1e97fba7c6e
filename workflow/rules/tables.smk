rule table:
    """Mean ± std over seeds per cell, the paper's value beside it, and the difference; or a leaderboard (layout:
    leaderboard): every method against a baseline per regime, paired tests over seeds, Holm-corrected.
    """
    input:
        lambda w: [GRID.cell_path(**c) for c in GRID.table_cells(GRID.table(w.table))],
    output:
        csv=f"{TABLE}.csv",
        md=f"{TABLE}.md",
        html=report(
            f"{TABLE}.html",
            caption="../report/table.rst",
            category="Tables",
            subcategory=lambda w: GRID.table(w.table)["paper"],
        ),
    log:
        "logs/table/{table}.log",
    wildcard_constraints:
        table="|".join(GRID.tables) or "NONE",
    conda:
        "../../envs/fed.yaml"
    params:
        code=script_code("table.py"),
        table=lambda w: GRID.table(w.table),
        preset=lambda w: GRID.preset(GRID.table(w.table)["preset"]),
        cells=lambda w: GRID.table_cells(GRID.table(w.table)),
        verdict=CONFIG["verdict"],
        sweeps=lambda w: {
            m: GRID.sweeps[m]
            for m in GRID.table(w.table)["methods"]
            if m in GRID.sweeps
        },
        implemented=GRID.implemented(),
        protocols=lambda w: {
            m: CONFIG["methods"][m]["protocol"]
            for m in GRID.table(w.table)["methods"]
            if CONFIG["methods"].get(m, {}).get("protocol")
        },
    script:
        "../scripts/table.py"


rule costs:
    """Wall time and generation time of every method of a paper's tables, relative to FedAvg; and their privacy
    ledger (what left the clients, and the guarantees stated for it)."""
    input:
        unpack(lambda w: GRID.cost_inputs(w.paper, w.preset)),
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
        code=script_code("costs.py"),
        cells=lambda w: GRID.cost_cells(w.paper, w.preset),
        audited=lambda w: GRID.cost_cells(w.paper, w.preset, audited=True),
        baseline=lambda w: GRID.cost_baseline(w.paper, w.preset),
    script:
        "../scripts/costs.py"


rule answer:
    """An audited leaderboard's answer: per method, where it beats the baseline, at what privacy and compute price
    (fed.reporting.answer: read from the leaderboard, cost and privacy tables)."""
    input:
        leaderboard=lambda w: f"{REPORTS}/tables/{answer_table(w)['output']}.csv",
        costs=lambda w: "{0}/tables/{paper}/costs_{preset}.csv".format(
            REPORTS, **answer_table(w)
        ),
        privacy=lambda w: "{0}/tables/{paper}/privacy_{preset}.csv".format(
            REPORTS, **answer_table(w)
        ),
    output:
        csv=f"{REPORTS}/tables/{{answer}}.csv",
        md=f"{REPORTS}/tables/{{answer}}.md",
        html=report(
            f"{REPORTS}/tables/{{answer}}.html",
            caption="../report/answer.rst",
            category="Summary",
            subcategory=lambda w: answer_table(w)["paper"],
        ),
    log:
        "logs/answer/{answer}.log",
    wildcard_constraints:
        answer="|".join(map(re.escape, GRID.answers())) or "NONE",
    conda:
        "../../envs/fed.yaml"
    params:
        code=script_code("answer.py"),
        table=answer_table,
        reduction=lambda w: GRID.preset(answer_table(w)["preset"]).get("reduction", ""),
    script:
        "../scripts/answer.py"


rule analyses:
    """A leaderboard's analyses named in advance (fed.reporting.analyses): the primary regime-level test and the
    secondary ones, each Holm-corrected in its family, every metric."""
    input:
        lambda w: [GRID.cell_path(**c) for c in GRID.table_cells(analysed_table(w))],
    output:
        csv=f"{REPORTS}/tables/{{analysed}}.csv",
        md=f"{REPORTS}/tables/{{analysed}}.md",
        html=report(
            f"{REPORTS}/tables/{{analysed}}.html",
            caption="../report/analyses.rst",
            category="Tables",
            subcategory=lambda w: analysed_table(w)["paper"],
        ),
    log:
        "logs/analyses/{analysed}.log",
    wildcard_constraints:
        analysed="|".join(map(re.escape, GRID.analyses())) or "NONE",
    conda:
        "../../envs/fed.yaml"
    params:
        code=script_code("analyses.py"),
        table=analysed_table,
        cells=lambda w: GRID.table_cells(analysed_table(w)),
        report=lambda w: GRID.preset(analysed_table(w)["preset"])["report"],
    script:
        "../scripts/analyses.py"


rule claims:
    """A paper's headline statements, each supported / contradicted / inconclusive by a test over seeds."""
    input:
        unpack(lambda w: GRID.claim_sources(w.paper)),
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
        code=script_code("claims.py"),
        claims=lambda w: {
            n: c for n, c in CONFIG["claims"].items() if c["paper"] == w.paper
        },
        reductions=lambda w: {
            s: GRID.source_reduction(s) for s in GRID.claim_sources(w.paper)
        },
    script:
        "../scripts/claims.py"


rule summary:
    """The report's opening page: table cells per verdict, per paper and table, and every paper's claims; and its
    picture, every compared cell as ours − paper by verdict."""
    input:
        tables=[f"{REPORTS}/tables/{t}.csv" for t in GRID.verdict_tables()],
        claims=[f"{REPORTS}/tables/{p}/claims.csv" for p in sorted(GRID.claim_papers)],
    output:
        rst=f"{REPORTS}/summary.rst",
        md=f"{REPORTS}/summary.md",
        html=report(
            f"{REPORTS}/summary.html",
            caption="../report/summary.rst",
            category="Summary",
        ),
        cells=f"{REPORTS}/figures/summary.csv",
        figure=report(
            f"{REPORTS}/figures/summary.png",
            caption="../report/summary_figure.rst",
            category="Summary",
        ),
    log:
        "logs/summary.log",
    conda:
        "../../envs/fed.yaml"
    params:
        code=script_code("summary.py"),
        tables=GRID.verdict_tables(),
        papers={t: GRID.table(t)["paper"] for t in GRID.verdict_tables()},
        labels={t: GRID.table(t).get("table", t) for t in GRID.verdict_tables()},
        claim_papers=sorted(GRID.claim_papers),
    script:
        "../scripts/summary.py"

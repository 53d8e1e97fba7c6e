rule table:
    """Mean ± std over seeds per cell, the paper's value beside it, and the difference."""
    input:
        lambda w: [cell_path(**c) for c in experiment_cells(config["experiments"][TABLES[w.table]])],
    output:
        csv=f"{REPORTS}/tables/{{table}}.csv",
        md=f"{REPORTS}/tables/{{table}}.md",
        html=report(
            f"{REPORTS}/tables/{{table}}.html",
            caption="../report/table.rst",
            category="Tables",
            subcategory=lambda w: config["experiments"][TABLES[w.table]]["paper"],
        ),
    params:
        experiment=lambda w: config["experiments"][TABLES[w.table]],
        preset=lambda w: preset(config["experiments"][TABLES[w.table]]["preset"]),
        cells=lambda w: experiment_cells(config["experiments"][TABLES[w.table]]),
        implemented=lambda w: [m for m in config["methods"] if algorithm(m) in ALGORITHMS],
    wildcard_constraints:
        table="|".join(TABLES) or "NONE",
    script:
        "../scripts/table.py"

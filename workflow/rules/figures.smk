# The papers' figures. Partition figures: data.smk.


rule figure:
    input:
        unpack(lambda w: GRID.figure_inputs(GRID.figure(w.figure))),
    output:
        png=report(
            f"{FIGURE}.png",
            caption="../report/figure.rst",
            category="Figures",
            subcategory=lambda w: GRID.figure(w.figure)["paper"],
        ),
        csv=f"{FIGURE}.csv",
    log:
        "logs/figure/{figure}.log",
    wildcard_constraints:
        figure="|".join(GRID.figures) or "NONE",
    conda:
        "../../envs/fed.yaml"
    params:
        code=lambda w: script_code(
            "figure.py", f"fed.reporting.figure_kinds.{GRID.figure(w.figure)['kind']}"
        ),
        figure=lambda w: GRID.figure(w.figure),
        cells=lambda w: GRID.figure_cells(GRID.figure(w.figure)),
        presets=lambda w: GRID.figure_presets(GRID.figure(w.figure)),
    script:
        "../scripts/figure.py"

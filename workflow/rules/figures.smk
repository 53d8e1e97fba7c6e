# The papers' figures. Partition figures: data.smk.


rule figure:
    input:
        unpack(figure_inputs),
    output:
        png=report(
            f"{REPORTS}/figures/{{figure}}.png",
            caption="../report/figure.rst",
            category="Figures",
            subcategory=lambda w: config["figures"][FIGURES[w.figure]]["paper"],
        ),
        csv=f"{REPORTS}/figures/{{figure}}.csv",
    log:
        "logs/figure/{figure}.log",
    wildcard_constraints:
        figure="|".join(FIGURES) or "NONE",
    conda:
        "../../envs/fed.yaml"
    params:
        figure=lambda w: config["figures"][FIGURES[w.figure]],
        cells=lambda w: figure_cells(config["figures"][FIGURES[w.figure]]),
        presets=lambda w: {
            p: preset(p)
            for p in FIGURE_KINDS[
                config["figures"][FIGURES[w.figure]]["kind"]
            ].presets(config["figures"][FIGURES[w.figure]])
        },
    script:
        "../scripts/figure.py"

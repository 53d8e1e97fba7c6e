# The papers' figures. Partition figures: data.smk.


def figure_inputs(w):
    """metrics.json and model.pt of every cell the figure reads, in figure_cells order."""
    cells = figure_cells(config["figures"][FIGURES[w.figure]])
    return {
        "metrics": [cell_path(**c) for c in cells],
        "models": [cell_path(**c, file="model.pt") for c in cells],
    }


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
    params:
        figure=lambda w: config["figures"][FIGURES[w.figure]],
        cells=lambda w: figure_cells(config["figures"][FIGURES[w.figure]]),
        presets=lambda w: {c["preset"]: preset(c["preset"]) for c in figure_cells(config["figures"][FIGURES[w.figure]])},
    wildcard_constraints:
        figure="|".join(FIGURES) or "NONE",
    script:
        "../scripts/figure.py"

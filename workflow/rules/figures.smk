# Figures of the papers arrive with their methods (Fed-ZDA Figures 3–5: issue 3). Partition figures: data.smk.

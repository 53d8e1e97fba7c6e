"""FLea Fig. 3: how separable the classes are in the penultimate representation (``embed``) when local data is
scarce. Per source cell (e.g. FedAvg at |D_k| = 5000 and at |D_k| = 100): the Davies–Bouldin score (scikit-learn;
lower = better separated) of the final global model's representations of its clients' training data and of the
test set, and of each client's model after one more local update (the preset's local epochs and optimiser) on the
same data; plus a t-SNE (scikit-learn) of the global model's test representations, coloured by class. The paper
starts this one round from a 40 %-accuracy global model; the cells keep their final model only."""

from __future__ import annotations

import pandas as pd

from fed.reporting.figure_kinds.common import CELLREF, cell, dataset_reader

NEEDS_MODELS = True
NEEDS_DATA = True

KEYS = {
    "sources": (True, {"type": "object", "additionalProperties": CELLREF, "minProperties": 1}),
    "clients": (False, {"type": "integer", "minimum": 1}),
    "samples": (False, {"type": "integer", "minimum": 20}),
}


def presets(fig):
    return [ref["preset"] for ref in fig["sources"].values()]


def cells(fig):
    return [
        cell(ref["preset"], d, ref["partition"], ref["method"], s)
        for ref in fig["sources"].values()
        for d in fig["datasets"]
        for s in fig["seeds"]
    ]


def representations(model, x):
    """``model.embed(x)`` in eval mode, as a numpy array."""
    import torch

    with torch.no_grad():
        return torch.cat([model.eval().embed(xb) for xb in x.split(500)]).numpy()


def davies_bouldin(z, y) -> float | None:
    """DB score of the representations ``z`` with the labels ``y`` as clusters (None below two classes)."""
    from sklearn.metrics import davies_bouldin_score

    y = y.numpy()
    return float(davies_bouldin_score(z, y)) if len(set(y.tolist())) > 1 else None


def separability_rows(fig, cells, files, data) -> tuple[pd.DataFrame, dict]:
    """Long form (source, dataset, seed, client, model, data, db) and, per source, the t-SNE of its first cell."""
    import copy
    import json
    from pathlib import Path

    import torch
    import torch.nn.functional as F
    from sklearn.manifold import TSNE

    from fed.reporting.zsdg_figures import load_cell_model
    from fed.training import SGDSettings, local_sgd

    labels = [label for label in fig["sources"] for _ in fig["datasets"] for _ in fig["seeds"]]
    rows, embeddings, read = [], {}, dataset_reader()
    for label, c, (metrics, model_path), tensors in zip(labels, cells, files, data):
        model, record = load_cell_model(metrics, model_path)
        if record["diverged"]:
            continue
        train, test = read(c["dataset"], tensors, "train"), read(c["dataset"], tensors, "test")
        n = fig.get("samples", 2000)
        x_test, y_test = test.x[:n], test.y[:n]
        clients = json.loads(Path(record["partition_file"]).read_text())["clients"][: fig.get("clients", 5)]
        cfg = record["config"]
        settings = SGDSettings(
            cfg["lr"],
            cfg["momentum"],
            cfg.get("optimizer", "sgd"),
            cfg["weight_decay"],
            cfg["batch_size"],
            cfg["local_epochs"],
        )
        base = dict(source=label, dataset=c["dataset"], seed=c["seed"])
        z_test = representations(model, x_test)  # for the global test score and the t-SNE
        rows.append({**base, "client": -1, "model": "global", "data": "test", "db": davies_bouldin(z_test, y_test)})
        for k, client in enumerate(clients):
            idx = torch.as_tensor(client["train"], dtype=torch.long)
            x, y = train.x[idx], train.y[idx]
            local = copy.deepcopy(model)
            gen = torch.Generator().manual_seed(c["seed"] * 1000 + k)
            local_sgd(local, x, y, lambda xb, yb, m=local: F.cross_entropy(m(xb), yb), gen, settings)
            for name, m, xs, ys, part in (
                ("global", model, x, y, "train"),
                ("local", local, x, y, "train"),
                ("local", local, x_test, y_test, "test"),
            ):
                db = davies_bouldin(representations(m, xs), ys)
                rows.append({**base, "client": k, "model": name, "data": part, "db": db})
        if label not in embeddings:
            tsne = TSNE(2, perplexity=min(30, len(z_test) // 4), random_state=c["seed"], init="pca")
            embeddings[label] = (tsne.fit_transform(z_test), y_test.numpy())
    return pd.DataFrame(rows), embeddings


def draw(fig, cells, files, stages, png, csv, caption, data):
    from fed.reporting.figures import plot_feature_separability

    df, embeddings = separability_rows(fig, cells, files, data)
    df.to_csv(csv, index=False)
    plot_feature_separability(df, embeddings, png, caption)

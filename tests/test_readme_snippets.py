"""The README's "Add a model", "Add a dataset" and "Add a paper" sections work as written (issue 26).

Each snippet is read from README.md by its section's heading and run against the real registries: the model is
registered as the section says, built and trained one round through the engine on the tests' synthetic data; the
dataset entry is registered and prepared from raw files in the layout it names, then loaded; the paper file, its
published numbers and its overlay are written where the section says, pass ``fed.validate.checked_files``, expand
in ``fed.grid.Grid`` and give verdicts from those numbers. A snippet that stops matching the code fails here.
"""

import json
import re
import struct

import pandas as pd
import pytest
import torch
import yaml
from conftest import REPO

from fed.algorithms import build_algorithm
from fed.config import FLConfig
from fed.data.datasets import DATASETS, DatasetInfo, load_dataset, load_labels, prepare
from fed.data.partition import make_partition
from fed.engine import Engine
from fed.models import MODELS, build_model


def section(title: str) -> str:
    text = (REPO / "README.md").read_text()
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## )", text, re.S | re.M)
    assert match, f"README.md has no section '## {title}'"
    return match[1]


def blocks(title: str, language: str) -> list[str]:
    """The ```language blocks of a section, dedented (they sit in a numbered list)."""
    found = []
    for indent, body in re.findall(rf"^( *)```{language}\n(.*?)^\1```", section(title), re.S | re.M):
        found.append("\n".join(line[len(indent) :] for line in body.splitlines()))
    assert found, f"README.md '## {title}' has no ```{language} block"
    return found


@pytest.fixture
def registry_entries():
    """Restores MODELS and DATASETS after a test registers an entry in them."""
    models, datasets = dict(MODELS), dict(DATASETS)
    yield
    MODELS.clear(), MODELS.update(models)
    DATASETS.clear(), DATASETS.update(datasets)


def test_a_model_added_as_the_readme_says_builds_splits_and_trains(registry_entries, synthetic_root):
    (code,) = blocks("Add a model", "python")
    namespace: dict = {}
    exec(compile(code, "README.md: Add a model", "exec"), namespace)
    name, cls = re.search(r'`"(\w+)": (\w+),`', section("Add a model")).groups()  # the MODELS entry it shows
    MODELS[name] = namespace[cls]
    model = build_model(name, 1, 10, 28).eval()
    x = torch.randn(4, 1, 28, 28)
    with torch.no_grad():
        assert torch.equal(model.head(model.features(x)), model(x))
        assert torch.allclose(model.classify(model.embed(x)), model(x), atol=1e-6)
    assert model.cut_layer in dict(model.named_modules())
    assert any(isinstance(m, torch.nn.BatchNorm2d) for m in model.modules())  # what ZSDG inverts
    train, test = (load_dataset("synthetic", synthetic_root, s) for s in ("train", "test"))
    part = make_partition(load_labels("synthetic", synthetic_root), "iid", 4, seed=0)
    cfg = FLConfig(num_clients=4, fraction=0.5, rounds=1, local_epochs=1, batch_size=50, model=name)
    for algorithm in ("fedavg", "ccvr"):  # CCVR re-trains classify() on embed()'s virtual features
        params = {"virtual_per_class": 5, "epochs": 1} if algorithm == "ccvr" else {}
        result = Engine(cfg, build_algorithm(algorithm, **params), train, test, part, 0, progress=None).run()
        assert result["history"][-1]["round"] == 1 and 0 <= result["last"]["global_acc"] <= 100


def idx_files(raw, n: int, size: int, classes: int) -> None:
    """``n`` samples in the MNIST idx layout torchvision's readers take (uncompressed)."""
    raw.mkdir(parents=True)
    g = torch.Generator().manual_seed(0)
    for split in ("train", "t10k"):
        images = torch.randint(0, 256, (n, size, size), generator=g, dtype=torch.uint8)
        (raw / f"{split}-images-idx3-ubyte").write_bytes(
            struct.pack(">IIII", 2051, n, size, size) + images.numpy().tobytes()
        )
        labels = (torch.arange(n) % classes).to(torch.uint8)
        (raw / f"{split}-labels-idx1-ubyte").write_bytes(struct.pack(">II", 2049, n) + labels.numpy().tobytes())


def test_a_dataset_added_as_the_readme_says_prepares_offline_and_loads(registry_entries, tmp_path):
    (code,) = blocks("Add a dataset", "python")
    info = eval(compile(code, "README.md: Add a dataset", "eval"), {"DatasetInfo": DatasetInfo})
    assert isinstance(info, DatasetInfo)
    DATASETS[info.name] = info
    raw_dir = re.match(r"([^{]*/)", info.files)[1]  # the folder its offline error names
    idx_files(tmp_path / raw_dir, 30, info.size, info.num_classes)
    prepare(info.name, tmp_path, download=False)
    train = load_dataset(info.name, tmp_path, "train")
    assert tuple(train.x.shape) == (30, info.channels, info.size, info.size) and train.num_classes == info.num_classes
    assert train.x.dtype == torch.float32 and set(train.y.tolist()) == set(range(info.num_classes))


@pytest.fixture
def paper_repo(tmp_path, monkeypatch):
    """A checkout with the README's paper file, published numbers and overlay added where the section says."""
    paper_file, overlay = blocks("Add a paper", "yaml")
    (csv,) = blocks("Add a paper", "csv")
    path = re.match(r"# (config/papers/(\w+)\.yaml)", paper_file)
    overlay_name = re.match(r"# (\S+\.yaml)", overlay)[1]
    repo = tmp_path / "repo"
    (repo / "config/papers").mkdir(parents=True)
    for p in (REPO / "config/papers").glob("*.yaml"):
        (repo / "config/papers" / p.name).symlink_to(p)
    (repo / "config.yaml").symlink_to(REPO / "config.yaml")
    (repo / "workflow").symlink_to(REPO / "workflow")
    (repo / path[1]).write_text(paper_file)
    (repo / overlay_name).write_text(overlay)
    published = tmp_path / f"{path[2]}.csv"  # src/fed/reporting/data/<paper>.csv, kept out of the package here
    published.write_text(csv + "\n")
    import fed.reporting.tables as tables

    real = tables.paper_values
    monkeypatch.setattr(
        tables,
        "paper_values",
        lambda p: pd.read_csv(published, dtype=str, keep_default_na=False) if p == path[2] else real(p),
    )
    monkeypatch.setattr("fed.validate.published_papers", lambda: [*tables.published_papers(), path[2]])
    return repo, path[2], repo / overlay_name


def test_a_paper_added_as_the_readme_says_checks_expands_and_gets_verdicts(paper_repo):
    from fed.grid import Grid
    from fed.reporting.tables import build_table, paper_values
    from fed.validate import checked_files

    repo, paper, overlay = paper_repo
    config, _ = checked_files([overlay], repo)
    assert {t["paper"] for t in config["tables"].values()} == {paper}  # `papers:` in the overlay: this paper alone
    grid = Grid(config, root=repo)
    for table in config["tables"].values():
        cells = grid.table_cells(table)
        assert len(cells) == len(table["datasets"]) * len(table["partitions"]) * len(table["methods"]) * len(
            table["seeds"]
        )
        assert all(grid.cell_paper[tuple(c.values())] == paper for c in cells)
        assert table["output"] in grid.tables
        rows = build_table(
            pd.DataFrame(columns=["dataset", "partition", "method", "metric", "value", "protocol", "diverged"]),
            paper_values(paper),
            table["table"],
            table["datasets"],
            table["partitions"],
            {m: table.get("paper_method", {}).get(m, m) for m in table["methods"]},
            table["metrics"],
            grid.preset(table["preset"])["report"],
            set(grid.implemented()),
        )
        assert rows.paper_value.notna().all(), rows[rows.paper_value.isna()]  # every cell has its published number
    for fig in config["figures"].values():
        assert grid.figure_cells(fig) and all(tuple(c.values()) in grid.cell_paper for c in grid.figure_cells(fig))
    assert set(config["claims"]) and all(c["paper"] == paper for c in config["claims"].values())


def test_a_method_a_user_adds_to_the_papers_table_joins_no_claim(paper_repo):
    """README, "Add a paper" step 4: rivals default to the paper's own methods."""
    from fed.reporting.claims import best_method
    from fed.validate import checked_files

    repo, paper, overlay = paper_repo
    table_name, table = next(iter(yaml.safe_load(section_paper_file())["tables"].items()))
    user = {
        "methods": {"mymethod": {"algorithm": "fedavg"}},
        "tables": {table_name: {"methods": [*table["methods"], "mymethod"]}},
    }
    extra = overlay.with_name("user.yaml")
    extra.write_text(json.dumps(user))
    config, _ = checked_files([overlay, extra], repo)
    assert "mymethod" in config["tables"][table_name]["methods"]
    for claim in config["claims"].values():
        if claim["kind"] in ("best_method", "margin_count"):
            assert "mymethod" not in claim["rivals"] and set(claim["methods"]) <= set(claim["rivals"])
            rows = [
                {
                    "dataset": d,
                    "partition": p,
                    "method": m,
                    "metric": claim["metric"],
                    "seeds": 3,
                    "ours_mean": mean,
                    "ours_std": 0.1,
                }
                for d in table["datasets"]
                for p in table["partitions"]
                for m, mean in [(claim["methods"][0], 80.0), ("fedavg", 70.0), ("mymethod", 99.0)]
            ]
            assert best_method(pd.DataFrame(rows), claim)["verdict"] == "supported"  # mymethod's 99 is no rival


def section_paper_file() -> str:
    return blocks("Add a paper", "yaml")[0]

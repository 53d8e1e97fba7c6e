"""The HTML report as a person sees it: rendered in headless Chromium, tables and figures visible."""

import os
import shutil
import time

import pytest
from conftest import REPO, snakemake

CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")


@pytest.fixture(scope="module")
def browser():
    if not (CHROMIUM and DRIVER):
        pytest.skip("headless Chromium not installed: apt-get install chromium chromium-driver")
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium not installed (pip install -e '.[dev]')")
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in [
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--window-size=1400,1000",
    ]:
        opts.add_argument(arg)
    driver = webdriver.Chrome(service=Service(DRIVER), options=opts)
    yield driver
    driver.quit()


def open_item(driver, category: str, path: str):
    """Click a result category, then the 'eye' button of one item; returns the item's iframe."""
    from selenium.webdriver.common.by import By

    driver.find_element(By.LINK_TEXT, category).click()
    time.sleep(0.5)
    paper = path.split("/")[2]  # reports/<tables|figures>/<paper>/...: a category with several papers lists them
    if driver.find_elements(By.LINK_TEXT, paper):
        driver.find_element(By.LINK_TEXT, paper).click()
        time.sleep(0.5)
    row = driver.find_element(By.XPATH, f"//td[text()='{path}']/ancestor::tr[1]")
    row.find_element(By.XPATH, ".//a[@iconname='eye']").click()
    time.sleep(1.5)
    return driver


@pytest.mark.slow
def test_report_shows_tables_and_figures(smoke_run, browser, tmp_path):
    from selenium.webdriver.common.by import By

    workdir, _ = smoke_run
    report = workdir / "report.html"
    snakemake(workdir, "--configfile", str(REPO / "config/smoke.yaml"), "--report", str(report))
    browser.get(report.as_uri())
    time.sleep(2)
    landing = browser.find_element(By.TAG_NAME, "body").text  # opens on the summary, not on the DAG
    assert "Table cells per verdict" in landing and "zda_best_local_accuracy" in landing, landing[:2000]
    for category in ("Summary", "Tables", "Figures", "Partitions"):
        assert browser.find_elements(By.LINK_TEXT, category), f"no {category} category in the report"

    open_item(browser, "Tables", "reports/tables/fedzda/table1.html")
    frame = browser.find_element(By.TAG_NAME, "iframe")
    assert frame.is_displayed() and frame.size["height"] > 300
    browser.switch_to.frame(frame)
    text = browser.find_element(By.TAG_NAME, "body").text
    rows = browser.find_elements(By.TAG_NAME, "tr")
    browser.switch_to.default_content()
    browser.save_screenshot(str(tmp_path / "report-table1.png"))
    assert "Fed-ZDA Table 1" in text and "smoke config" in text and "fedzdas" in text
    assert len(rows) == 1 + 5  # the paper's layout: header + one row per method (columns: partition x metric)
    assert "no paper value" in text  # the legend: smoke data have no published numbers

    browser.get(report.as_uri())
    time.sleep(2)
    open_item(browser, "Figures", "reports/figures/fedzda/fig5.png")
    images = [img for img in browser.find_elements(By.TAG_NAME, "img") if img.is_displayed()]
    browser.save_screenshot(str(tmp_path / "report-fig5.png"))
    assert any(img.size["width"] > 300 for img in images), "the figure is not shown"
    assert (tmp_path / "report-table1.png").stat().st_size > 10_000


def screenshot_page(driver, path, width: int = 1100) -> None:
    """The whole page (a table's HTML file), no scroll bar."""
    driver.set_window_size(width, 200)  # shorter than the page: its scroll height is then the content's
    frame = driver.execute_script("return window.outerHeight - window.innerHeight")
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(width, frame + height)
    driver.save_screenshot(str(path))


@pytest.mark.slow
def test_the_readme_pictures_are_the_committed_fmnist_run(browser, tmp_path):
    """README's report pictures (docs/img/report.png, docs/img/fedzda_table1.png) are the report of Fed-ZDA's
    committed paper-scale FMNIST cells (reference/fmnist), rebuilt without training, and README's Fed-ZDA status
    row gives the counts that report gives. To refresh the pictures:
    FEDREPRO_PICTURES=1 python -m pytest tests/test_report.py -k readme_pictures."""
    import pandas as pd
    from selenium.webdriver.common.by import By

    from fed.data.datasets import DEBIAN_FASHION_MNIST
    from fed.reporting.summary import paper_counts, verdict_counts

    if not (DEBIAN_FASHION_MNIST.exists() or (REPO / "data/fmnist/tensors.pt").exists()):
        pytest.skip("Fashion-MNIST is not on this machine: apt-get install dataset-fashion-mnist")
    if (REPO / "data/fmnist/tensors.pt").exists():  # the prepared cache, where there is one (55 MB, not copied)
        (tmp_path / "data/fmnist").mkdir(parents=True)
        (tmp_path / "data/fmnist/tensors.pt").symlink_to(REPO / "data/fmnist/tensors.pt")
    configs = ("--configfile", str(REPO / "config/fmnist.yaml"), str(REPO / "config/fmnist_committed.yaml"))
    dry = snakemake(tmp_path, "-n", *configs).stdout
    assert "rule train:" not in dry and "rule stage:" not in dry and "rule summary:" in dry
    snakemake(tmp_path, "--cores", "1", *configs)
    report = tmp_path / "report.html"
    snakemake(tmp_path, *configs, "--report", str(report))
    assert not (tmp_path / "results/runs").exists()  # nothing trained

    tables = [("fedzda", t, pd.read_csv(tmp_path / f"reports/tables/fedzda/{t}.csv")) for t in ("table1", "table2")]
    counts = paper_counts(verdict_counts(tables)).set_index("paper").loc["fedzda"]
    status = f"{counts['reproduced']} of {counts['cells']} reproduced, {counts['above paper']} above, "
    status += f"{counts['below paper']} below"
    assert status in (REPO / "README.md").read_text(), status

    browser.set_window_size(1200, 700)
    browser.get(report.as_uri())
    time.sleep(2)
    landing = browser.find_element(By.TAG_NAME, "body").text
    assert "Reproduction summary" in landing and "zda_best_local_accuracy" in landing, landing[:2000]
    row = browser.find_element(By.XPATH, "//td[text()='fedzda']/ancestor::tr[1]").text.split()
    assert row == ["fedzda", *(str(v) for v in counts)], row
    pictures = {"report.png": tmp_path / "report.png", "fedzda_table1.png": tmp_path / "fedzda_table1.png"}
    browser.save_screenshot(str(pictures["report.png"]))

    browser.get((tmp_path / "reports/tables/fedzda/table1.html").as_uri())  # the page the report's Tables embed
    time.sleep(1)
    text = browser.find_element(By.TAG_NAME, "body").text
    assert "Fed-ZDA Table 1" in text and "Full paper setting" in text and "reproduced" in text
    screenshot_page(browser, pictures["fedzda_table1.png"])
    for name, path in pictures.items():
        assert path.stat().st_size > 20_000, name
        if os.environ.get("FEDREPRO_PICTURES"):
            shutil.copyfile(path, REPO / "docs/img" / name)


@pytest.mark.slow
def test_every_caption_parses_and_its_rerun_command_is_the_one_used(smoke_run, tmp_path):
    """Captions are RST: a title with |D_k| once rendered as a docutils error. Each caption's re-run command carries
    the --configfile the report was built with (without it the preset may not exist) and dry-runs as written."""
    import html
    import re
    import shlex

    workdir, _ = smoke_run
    report = tmp_path / "report.html"
    smoke = str(REPO / "config/smoke.yaml")
    snakemake(workdir, "--configfile", smoke, "--report", str(report))
    text = report.read_text()
    assert "System Messages" not in text
    commands = [
        html.unescape(re.sub(r"<[^>]+>", "", m)).replace('\\"', '"')
        for m in re.findall(r'Re-run: <tt class=\\"docutils literal\\">(.*?)</tt>', text)
    ]
    assert len(commands) > 10
    by_rule = {}
    for command in commands:
        words = shlex.split(command)
        assert words[0] == "snakemake" and words[-2:] == ["--configfile", smoke], command
        by_rule.setdefault(words[words.index("--forcerun") + 1], words)
    assert set(by_rule) == {"table", "costs", "claims", "figure", "plot_partition"}
    for words in by_rule.values():
        proc = snakemake(workdir, "-n", *words[1:])
        assert "--forcerun" in " ".join(words) and proc.returncode == 0

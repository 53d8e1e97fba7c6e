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
    if os.environ.get("FEDREPRO_SCREENSHOT"):  # README's picture: FEDREPRO_SCREENSHOT=docs/img/report.png
        browser.save_screenshot(str(REPO / os.environ["FEDREPRO_SCREENSHOT"]))

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

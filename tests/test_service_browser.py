"""The service's web page in a real browser: Debian's headless Chromium driven by Selenium.

A person's path through the page, against a real `calibrate serve` (`service_fixtures`): load
the page, paste the API token, submit the small calibration of the bundled Nepal target, watch
it run in the live view until its progress reads 2/2 with a best f and the convergence plot,
see Figure 3 and the per-scheme table, find the emulator in the catalogue (filter, sort) and
download its Mahimahi command.  Screenshots of each step go to the test's tmp directory (their
paths are printed and recorded as the test's `screenshots` property), for a person to look at.
The browser's console must stay free of errors throughout.
"""

from __future__ import annotations

import base64
import os
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException, TimeoutException
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select, WebDriverWait

from service_fixtures import SMALL, Server, running_server

CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver")
JOB_TIMEOUT_S = 300  # the small calibration takes about 20 s; a busy machine more
UI_TIMEOUT_S = 20

pytestmark = [
    pytest.mark.needs_root,
    pytest.mark.skipif(CHROMIUM is None or CHROMEDRIVER is None,
                       reason="needs Debian's chromium and chromium-driver (apt-get install chromium "
                              "chromium-driver; scripts/install does)"),
]


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[Server]:
    if os.geteuid() != 0:
        pytest.skip("the calibration server runs emulators: needs root")
    with running_server(tmp_path_factory.mktemp("service")) as server:
        yield server


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[webdriver.Chrome]:
    """Headless Chromium at 1280 x 900, downloading into tmp_path/downloads; quit afterwards
    (chromedriver and every Chromium process with it)."""
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    options = Options()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                     "--window-size=1280,900", f"--user-data-dir={tmp_path / 'profile'}"):
        options.add_argument(argument)
    options.add_experimental_option("prefs", {"download.default_directory": str(downloads),
                                              "download.prompt_for_download": False})
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER, log_output=str(tmp_path / "chromedriver.log")),
                              options=options)
    try:
        driver.execute_cdp_cmd("Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(downloads)})
        yield driver
    finally:
        driver.quit()


class Shots:
    """Full-page screenshots, numbered in the order taken."""

    def __init__(self, driver: webdriver.Chrome, folder: Path) -> None:
        self.driver, self.folder, self.paths = driver, folder, []

    def __call__(self, name: str) -> Path:
        metrics = self.driver.execute_cdp_cmd("Page.getLayoutMetrics", {})["cssContentSize"]
        clip = {"x": 0, "y": 0, "width": metrics["width"], "height": metrics["height"], "scale": 1}
        shot = self.driver.execute_cdp_cmd("Page.captureScreenshot",
                                           {"format": "png", "captureBeyondViewport": True, "clip": clip})
        path = self.folder / f"{len(self.paths) + 1}-{name}.png"
        path.write_bytes(base64.b64decode(shot["data"]))
        self.paths.append(path)
        return path


def text(driver: webdriver.Chrome, element_id: str) -> str:
    try:
        return driver.find_element(By.ID, element_id).text
    except (NoSuchElementException, StaleElementReferenceException):
        return ""


def image_loaded(driver: webdriver.Chrome, element_id: str) -> bool:
    """The <img> is shown and its picture decoded."""
    return bool(driver.execute_script(
        "const img = document.getElementById(arguments[0]);"
        "return !!img && !img.hidden && img.offsetParent !== null && img.complete && img.naturalWidth > 0;",
        element_id))


def wait(driver: webdriver.Chrome, condition, what: str, timeout: float = UI_TIMEOUT_S, server: Server | None = None):
    try:
        return WebDriverWait(driver, timeout, poll_frequency=0.25).until(condition)
    except TimeoutException:
        log = "" if server is None else f"\nserver log:\n{server.log.read_text()[-3000:]}"
        raise AssertionError(f"{what}: not seen in {timeout:.0f} s; the page says "
                             f"{driver.find_element(By.TAG_NAME, 'main').text[:1500]!r}{log}") from None


def console_errors(driver: webdriver.Chrome) -> list[str]:
    return [entry["message"] for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]


def test_submit_watch_and_download(server: Server, browser: webdriver.Chrome, tmp_path: Path,
                                   record_property) -> None:
    driver = browser
    shots = Shots(driver, tmp_path)
    started = time.monotonic()

    # -- the page, the token ------------------------------------------------------------------
    driver.get(server.url + "/")
    assert "calibrate" in driver.title
    wait(driver, lambda d: d.find_element(By.ID, "submit-view").is_displayed(), "the submit form")
    assert "No token" in text(driver, "token-state")
    driver.find_element(By.ID, "token-input").send_keys(server.token)
    driver.find_element(By.ID, "token-save").click()
    wait(driver, lambda d: "saved" in text(d, "token-state"), "the token saved")
    assert driver.execute_script("return localStorage.getItem('calibrate.token')") == server.token

    # -- submit ---------------------------------------------------------------------------------
    driver.find_element(By.ID, "target").send_keys("nepal")
    driver.find_element(By.ID, "schemes").send_keys(SMALL["schemes"])
    Select(driver.find_element(By.ID, "links")).select_by_value(SMALL["links"])
    for field in ("budget", "replicates", "runtime"):
        box = driver.find_element(By.ID, field)
        box.clear()
        box.send_keys(str(SMALL[field]))
    shots("submit-form")
    driver.find_element(By.ID, "submit-button").click()
    wait(driver, lambda d: "#/jobs/" in d.current_url, "the live view after submitting")
    job_id = driver.current_url.split("#/jobs/", 1)[1]
    assert text(driver, "job-id") == job_id
    submitted = time.monotonic()

    # -- the live view: running, then done ------------------------------------------------------
    wait(driver, lambda d: text(d, "job-state") in ("queued", "running", "done"), "the job's state")
    assert text(driver, "job-target") == "nepal"
    if text(driver, "job-state") != "done":
        assert driver.find_element(By.ID, "job-cancel").is_displayed()
        shots("live-view-running")

    def finished(d) -> bool:
        state = text(d, "job-state")
        assert state not in ("failed", "cancelled"), f"the job ended {state}: {text(d, 'job-message')}"
        return text(d, "progress-constant-text") == "2/2"

    wait(driver, finished, "progress 2/2", timeout=JOB_TIMEOUT_S, server=server)
    wait(driver, lambda d: text(d, "job-state") == "done", "the state done", timeout=60, server=server)
    job_done = time.monotonic()
    assert re.fullmatch(r"\d+\.\d %( ± \d+\.\d)?", text(driver, "job-best-f")), text(driver, "job-best-f")
    summary = server.get(f"/v1/calibrations/{job_id}").json()
    assert text(driver, "job-best-f").startswith(f"{summary['best']['f']:.1f} %")
    assert "Mbit/s" in text(driver, "job-best-emulator")
    assert text(driver, "job-best-text").startswith("mm-delay ")
    wait(driver, lambda d: image_loaded(d, "job-convergence"), "the convergence plot")
    assert driver.find_element(By.ID, "job-convergence").get_attribute("data-evaluations") == "2"
    assert not driver.find_element(By.ID, "job-cancel").is_displayed()
    assert text(driver, "job-eta") == "finished"

    # -- Figure 3 and the per-scheme table ------------------------------------------------------
    wait(driver, lambda d: image_loaded(d, "job-figure3"), "Figure 3")
    table = driver.execute_script(
        "return [...document.querySelectorAll('#job-schemes-body tr')]"
        ".map(tr => [...tr.cells].map(cell => cell.textContent.trim()));")
    schemes = {row[0]: row[1:] for row in table}
    assert set(schemes) == set(SMALL["schemes"].split(",")), table
    for scheme, cells in schemes.items():
        assert scheme in cells[0], cells  # what this host ran for the label (vegas-2017)
        assert all(re.fullmatch(r"\d+(\.\d+)?", cell) for cell in cells[2:]), cells
    for link in ("job-download-mahimahi", "job-download-report", "job-download-export"):
        assert driver.find_element(By.ID, link).get_attribute("href").startswith(server.url + "/v1/calibrations/")
    shots("live-view-done")

    # -- the list of jobs -----------------------------------------------------------------------
    driver.find_element(By.ID, "nav-jobs").click()
    wait(driver, lambda d: "done" in text(d, f"job-row-{job_id}"), "the job in the list of jobs")
    assert "2/2" in text(driver, f"job-row-{job_id}")
    shots("jobs")

    # -- the catalogue: filter, sort, download --------------------------------------------------
    driver.find_element(By.ID, "nav-catalogue").click()
    row_id = f"emulator-row-{job_id}"
    wait(driver, lambda d: text(d, row_id) != "", "the emulator in the catalogue")
    row = text(driver, row_id)
    assert "nepal" in row and "constant" in row and f"{summary['best']['f']:.1f}" in row, row
    box = driver.find_element(By.ID, "catalogue-filter")
    box.send_keys("no such path")
    wait(driver, lambda d: d.find_element(By.ID, "catalogue-empty").is_displayed(), "the filter hiding it")
    box.clear()
    box.send_keys("nepal")
    wait(driver, lambda d: text(d, row_id) != "", "the filter showing it again")
    sort_f = driver.find_element(By.ID, "sort-f")
    assert sort_f.find_element(By.XPATH, "..").get_attribute("aria-sort") == "ascending"
    sort_f.click()
    assert sort_f.find_element(By.XPATH, "..").get_attribute("aria-sort") == "descending"
    shots("catalogue")

    driver.find_element(By.ID, f"download-mahimahi-{job_id}").click()
    downloads = tmp_path / "downloads"

    def downloaded(_):
        files = [p for p in downloads.iterdir() if not p.name.endswith(".crdownload")]
        return files[0] if files else None

    command_file = wait(driver, downloaded, "the downloaded Mahimahi command")
    command = command_file.read_text().strip()
    assert re.match(r"mm-delay \d+ .*mm-link \S+ \S+", command), command
    assert command == server.get(f"/v1/emulators/{job_id}/mahimahi.txt").text.strip()

    assert console_errors(driver) == []
    record_property("screenshots", [str(p) for p in shots.paths])
    print("screenshots:", *shots.paths, sep="\n  ")
    print(f"time: {submitted - started:.1f} s to submit, {job_done - submitted:.1f} s for the job, "
          f"{time.monotonic() - job_done:.1f} s after it")

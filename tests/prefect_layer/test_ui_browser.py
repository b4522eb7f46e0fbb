"""The Prefect UI, in a real browser (headless Chromium driven by Selenium over
Debian's chromedriver; `.ci/run` installs both): a user's "Custom run" form for
a deployment shows every config field with its description and refuses an
invalid value, naming the field; a finished demo run's artifacts render (the
results table, the lineage, the learning-curve image).

Screenshots go to $LUDIC_SCREENSHOTS (the README's, in docs/, came from
`LUDIC_SCREENSHOTS=docs .venv/bin/python -m pytest -m heavy tests/prefect_layer/test_ui_browser.py`),
else to the test's tmp dir.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import urllib.request
from pathlib import Path

import pytest

from ludic_core.ports import free_port
from tests.prefect_layer.stack import PREFECT, _run, _stop, base_env, start_server

pytestmark = [pytest.mark.slow, pytest.mark.heavy]


def _binary(*names: str) -> str:
    for name in names:
        if found := shutil.which(name):
            return found
    raise FileNotFoundError(f"none of {names} is installed (Debian: apt-get install chromium chromium-driver)")


@pytest.fixture(scope="module")
def ui(tmp_path_factory, prefect_db):
    """A server with its UI on, the evaluate deployment, and a browser."""
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    tmp = tmp_path_factory.mktemp("prefect-ui")
    api_url = f"http://127.0.0.1:{free_port()}/api"
    env = base_env(api_url, tmp / "home", prefect_db)
    env["PREFECT_SERVER_UI_ENABLED"] = "true"
    server = start_server(api_url, env, tmp / "server.log")
    browser = None
    try:
        _run([*PREFECT, "work-pool", "create", "ludic-process", "--type", "process"], env, timeout=60)
        _run([*PREFECT, "--no-prompt", "deploy", "--name", "evaluate"], env, timeout=180)
        options = Options()
        options.binary_location = _binary("chromium", "chromium-browser", "google-chrome")
        for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1800"):
            options.add_argument(arg)
        browser = webdriver.Chrome(service=Service(_binary("chromedriver")), options=options)
        shots = Path(os.environ.get("LUDIC_SCREENSHOTS") or tmp / "screenshots")
        shots.mkdir(parents=True, exist_ok=True)
        yield {"api": api_url, "ui": api_url.removesuffix("/api"), "browser": browser, "shots": shots}
    finally:
        if browser is not None:
            browser.quit()
        _stop(server)


def _api(ui, path: str, body: dict | None = None):
    req = urllib.request.Request(f"{ui['api']}{path}", data=None if body is None else json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"}, method="GET" if body is None else "POST")
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.load(r)


def _wait(browser, condition, what: str, timeout_s: float = 30):
    from selenium.webdriver.support.ui import WebDriverWait

    try:
        return WebDriverWait(browser, timeout_s, poll_frequency=0.2).until(condition)
    except Exception as exc:  # noqa: BLE001 - say what the page showed instead
        body = browser.find_element("tag name", "body").text
        raise AssertionError(f"{what} not seen in {timeout_s} s; the page shows:\n{body[:3000]}") from exc


def _click(browser, element) -> None:
    """Scroll it to the middle and click (a toast may sit over a plain click's point)."""
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'}); arguments[0].click()", element)


def _norm(text: str | None) -> str:
    return re.sub(r"\s+", " ", (text or "").replace("`", "")).strip()


def _expected_fields() -> dict[str, str]:
    """label -> description of the fields a user fills in: evaluate's config and
    the env and agent sections every flow shares."""
    from flows.evaluate import EvaluateConfig
    from ludic_core.compose.configs import AgentConfig, EnvConfig

    out = {}
    for model in (EvaluateConfig, EnvConfig, AgentConfig):
        for name, field in model.model_fields.items():
            title = field.title or name.replace("_", " ").title()
            out[title if field.is_required() else f"{title} (Optional)"] = _norm(field.description)
    return out


def _custom_run_page(ui) -> str:
    deployment = _api(ui, "/deployments/name/evaluate/evaluate")
    browser = ui["browser"]
    browser.get(f"{ui['ui']}/deployments/deployment/{deployment['id']}/run")
    _wait(browser, lambda b: b.find_elements("css selector", ".schema-form-property"), "the parameters form")
    return deployment["id"]


def test_the_custom_run_form_shows_every_field_with_its_description(ui):
    _custom_run_page(ui)
    browser = ui["browser"]
    expected = _expected_fields()
    _wait(browser, lambda b: len(b.find_elements("css selector", ".schema-form-property")) >= len(expected),
          "every field")
    shown = browser.execute_script(
        "return [...document.querySelectorAll('.schema-form-property')].map(p => ["
        "  p.querySelector('.schema-form-property__label')?.innerText,"
        "  p.querySelector('.schema-form-property__description')?.innerText])")
    labels: dict[str, set[str]] = {}
    for label, description in shown:
        labels.setdefault(_norm(label), set()).add(_norm(description))
    missing = [label for label in expected if label not in labels]
    assert not missing, f"fields not in the form: {missing}; it shows {sorted(labels)}"
    wrong = {label: (want, labels[label]) for label, want in expected.items() if want and want not in labels[label]}
    assert not wrong, f"descriptions not shown as written (field: (ours, the form's)): {wrong}"
    browser.save_screenshot(str(ui["shots"] / "ui-custom-run.png"))


def test_the_form_refuses_an_invalid_value_naming_the_field_and_takes_a_valid_one(ui):
    from selenium.webdriver.common.by import By

    deployment_id = _custom_run_page(ui)
    browser = ui["browser"]
    episodes = browser.find_element(By.XPATH, (
        "//span[@class='schema-form-property__label' and starts-with(normalize-space(.), 'Episodes')]"
        "/ancestor::div[contains(concat(' ', @class, ' '), ' schema-form-property ')][1]//input"))
    submit = browser.find_element(By.XPATH, "//button[normalize-space(.)='Submit']")
    runs = lambda: _api(ui, "/flow_runs/filter", {"deployments": {"id": {"any_": [deployment_id]}}})  # noqa: E731
    before = len(runs())

    # the form fills in the deployment's values after it renders: type only once they are in,
    # and submit only once the input holds what was typed
    _wait(browser, lambda b: episodes.get_attribute("value"), "the deployment's value of Episodes")
    episodes.clear()
    episodes.send_keys("-1")
    _wait(browser, lambda b: episodes.get_attribute("value") == "-1", "-1 in the Episodes input")
    _click(browser, submit)
    toast = _wait(browser, lambda b: next((t for t in b.find_elements(By.CSS_SELECTOR, ".p-toast__message")
                                           if "cfg.episodes" in t.text), None), "an error naming cfg.episodes",
                  timeout_s=60)
    assert "less than the minimum of 1" in toast.text, toast.text
    browser.save_screenshot(str(ui["shots"] / "ui-invalid-value.png"))
    assert len(runs()) == before  # refused: no run was created

    episodes.clear()
    episodes.send_keys("3")
    _wait(browser, lambda b: episodes.get_attribute("value") == "3", "3 in the Episodes input")
    _click(browser, submit)
    _wait(browser, lambda b: len(runs()) == before + 1, "the new flow run", timeout_s=60)
    new = max(runs(), key=lambda r: r["created"])
    assert new["parameters"]["cfg"]["episodes"] == 3
    assert new["parameters"]["cfg"]["env"]["name"] == "tic_tac_toe"  # the deployment's other values went along


def test_a_finished_demo_runs_artifacts_render(ui, tmp_path):
    from prefect.settings import PREFECT_API_URL, temporary_settings
    from selenium.webdriver.common.by import By

    from flows.demo import DemoConfig, demo

    with temporary_settings({PREFECT_API_URL: ui["api"]}):
        state = demo(DemoConfig(run_dir=str(tmp_path / "demo"), teacher_episodes=256, sft_steps=60, rl_steps=3,
                                eval_episodes=20, progress_bar=False), return_state=True)
    assert state.is_completed(), state
    run_id = str(state.state_details.flow_run_id)
    browser = ui["browser"]

    browser.get(f"{ui['ui']}/runs/flow-run/{run_id}")
    tab = _wait(browser, lambda b: b.find_element(By.CSS_SELECTOR, "li.p-tab#artifacts"), "the Artifacts tab")
    _click(browser, tab)
    _wait(browser, lambda b: "demo-results" in b.find_element(By.TAG_NAME, "body").text, "the run's artifacts")
    browser.save_screenshot(str(ui["shots"] / "ui-run-artifacts.png"))

    artifacts = {a["key"]: a for a in _api(ui, "/artifacts/filter", {}) if a["key"]}

    browser.get(f"{ui['ui']}/artifacts/artifact/{artifacts['demo-results']['id']}")
    rows = _wait(browser, lambda b: b.find_elements(By.CSS_SELECTOR, "table tbody tr"), "the results table")
    stages = [r.find_elements(By.TAG_NAME, "td")[0].text for r in rows]
    assert stages == ["teacher", "before SFT", "after SFT", "after RL"], stages
    headers = [h.text for h in browser.find_elements(By.CSS_SELECTOR, "table thead th")]
    assert {"X win+draw", "O win+draw", "seconds"} <= set(headers), headers
    browser.save_screenshot(str(ui["shots"] / "ui-results-table.png"))

    browser.get(f"{ui['ui']}/artifacts/artifact/{artifacts['demo-lineage']['id']}")
    lineage = _wait(browser, lambda b: [c.text for c in b.find_elements(By.CSS_SELECTOR, "table td")],
                    "the lineage table")
    assert "SFT model" in lineage and any(str(tmp_path / "demo") in c for c in lineage), lineage

    browser.get(f"{ui['ui']}/artifacts/artifact/{artifacts['rl-learning-curve']['id']}")
    image = _wait(browser, lambda b: next((i for i in b.find_elements(By.CSS_SELECTOR, "img")
                                           if (i.get_attribute("src") or "").startswith("data:image/png")), None),
                  "the learning-curve image")
    _wait(browser, lambda b: b.execute_script("return arguments[0].complete && arguments[0].naturalWidth", image),
          "the image decoded")
    width = browser.execute_script("return arguments[0].naturalWidth", image)
    assert width > 300, width  # a real plot, decoded by the browser
    browser.save_screenshot(str(ui["shots"] / "ui-learning-curve.png"))

"""The page of `seq2seq serve` in a real browser: headless Chromium types a sentence, clicks
Translate, and finds the translation and its attention heatmap. The screenshot it takes is
kept in test-artifacts/serve-page.png. `make test-browser` installs what this needs."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from serve_helpers import start_server

from seq2seq.decode.translate import Translator

pytest.importorskip("fastapi", reason="the serve extra is not installed: pip install -e '.[serve]'")
playwright = pytest.importorskip(
    "playwright.sync_api", reason="the browser extra is not installed: make test-browser"
)
CHROMIUM = next(
    (shutil.which(name) for name in ("chromium", "chromium-browser") if shutil.which(name)), None
)
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="Chromium is not installed: make test-browser installs it"
)
ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"
SENTENCE = "boka mimi toto tape"


@pytest.fixture(scope="module")
def server(trained):
    process, url = start_server(trained)
    yield url
    process.terminate()
    process.wait(30)


@pytest.fixture(scope="module")
def page(server):
    with playwright.sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page()
        page.goto(server)
        yield page
        browser.close()


def test_the_page_translates_and_draws_the_attention(page, trained):
    best = Translator.load(trained).hypotheses([SENTENCE], nbest=2)[0]
    page.wait_for_function("document.getElementById('beam').options.length > 0")
    assert "src \u2192 tgt" in page.inner_text("#model")
    page.fill("#source", SENTENCE)
    page.select_option("#nbest", "2")
    page.click("#translate")
    page.wait_for_selector("#heatmap rect.cell")
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "serve-page.png"), full_page=True)
    hypotheses = page.locator(".hyp")
    assert hypotheses.count() == len(best) == 2
    assert hypotheses.nth(0).inner_text().startswith(best[0].text)
    columns = page.locator("#heatmap .source-piece").all_text_contents()
    rows = page.locator("#heatmap .target-piece").all_text_contents()
    assert columns[-1] == rows[-1] == "</s>"
    assert len(columns) == best[0].attention.size(-1) and len(rows) == best[0].attention.size(0)
    assert page.locator("#heatmap rect.cell").count() == len(columns) * len(rows)
    assert page.locator("#head-label").is_hidden()  # one head: nothing to choose
    assert page.locator("#into-label").is_hidden()  # one target language: none to choose


def test_an_error_is_shown_on_the_page(page):
    page.fill("#source", "x" * 2001)  # over the server's 2,000 characters per line
    page.click("#translate")
    page.wait_for_function("document.getElementById('error').textContent.length > 0")
    assert "text.0 has 2001 characters" in page.inner_text("#error")

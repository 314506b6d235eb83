"""`birdrl view` in a real headless Chromium (Debian's package, driven by Playwright; no
browser download): the pages render, links and filters work, no script throws. Screenshots
of every page type are kept under ``$BIRDRL_TEST_ARTIFACTS/viewer`` (default
``build/test-artifacts/viewer``). CI sets ``BIRDRL_REQUIRE_BROWSER=1`` so that a missing
browser fails instead of skipping."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from viewer_runs import make_run

from birdrl.view.build import build_view
from birdrl.view.chromium import CHROMIUM_FLAGS, chromium_path, missing_browser

ARTIFACTS = (
    Path(
        os.environ.get(
            "BIRDRL_TEST_ARTIFACTS", Path(__file__).parents[1] / "build" / "test-artifacts"
        )
    )
    / "viewer"
)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    reason = missing_browser()
    if reason is not None:
        if os.environ.get("BIRDRL_REQUIRE_BROWSER") == "1":
            pytest.fail(f"BIRDRL_REQUIRE_BROWSER=1 but {reason}")
        pytest.skip(reason)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(
            executable_path=str(chromium_path()), args=list(CHROMIUM_FLAGS)
        )
        yield chromium
        chromium.close()


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_view([make_run(tmp_path_factory.mktemp("viewer"))]).parent


class Tab:
    """One browser page that records every console error and uncaught exception."""

    def __init__(self, browser: Any, site: Path) -> None:
        self.page = browser.new_page(viewport={"width": 1400, "height": 900})
        self.site = site
        self.errors: list[str] = []
        self.page.on("pageerror", lambda exc: self.errors.append(f"uncaught: {exc}"))
        self.page.on(
            "console",
            lambda m: (
                self.errors.append(f"console.{m.type}: {m.text}")
                if m.type in ("error", "warning")
                else None
            ),
        )

    def open(self, route: str) -> Any:
        self.page.goto(f"{self.site.resolve().as_uri()}/index.html#{route}")
        return self.ready()

    def ready(self) -> Any:
        self.page.wait_for_selector("body[data-ready='1']", timeout=10_000)
        self.page.evaluate("delete document.body.dataset.ready")
        return self.page

    def click(self, selector: str) -> Any:
        self.page.click(selector)
        return self.ready()

    def healthy(self) -> None:
        """No script error, and the page shows something: fails on a blank page."""
        assert not self.errors, self.errors
        text = self.page.inner_text("main")
        assert len(text.strip()) > 40, f"blank page: {text!r}"
        failure = self.page.locator("main .failure")
        assert failure.count() == 0, failure.inner_text()

    def shot(self, name: str) -> Path:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        path = ARTIFACTS / f"{name}.png"
        self.page.screenshot(path=str(path), full_page=True)
        assert path.stat().st_size > 10_000  # a rendered page, not an empty canvas
        return path


@pytest.fixture
def tab(browser: Any, site: Path) -> Iterator[Tab]:
    t = Tab(browser, site)
    yield t
    t.page.close()


def test_run_page_to_task_to_episode(tab: Tab) -> None:
    page = tab.open("/run")
    tab.healthy()
    assert page.locator("table.stages tbody tr").count() == 5
    assert page.locator("svg.plot").count() >= 4  # per-stage evaluation + training curves
    rows = page.locator("table.stages tbody tr")
    assert "official" in rows.nth(0).inner_text()  # the scoring semantics of each stage
    assert "official, reward strict" in rows.nth(3).inner_text()
    tab.shot("run")
    page = tab.click("table.stages a:has-text('tool-use SFT')")
    assert "#/tasks?col=2" in page.url
    tab.healthy()
    assert page.locator("table.tasks tbody tr").count() == 9
    tab.shot("tasks")
    page.select_option("select[aria-label=outcome]", "solved")
    page = tab.click("table.tasks tbody tr:first-child td.cell a >> nth=2")
    assert "#/episode/2/" in page.url
    tab.healthy()
    assert page.locator("mark.call").count() >= 2  # the tool calls in the model's text
    tab.shot("episode")


def test_episode_shows_unparsed_turns_observations_diffs_and_tests(tab: Tab) -> None:
    page = tab.open("/tasks?col=2&outcome=solved")
    tab.click("table.tasks tbody tr:first-child td.cell a >> nth=2")
    tab.healthy()
    assert "Not a usable tool call" in page.inner_text(".msg.assistant >> nth=0")
    assert page.locator(".obs table.result th").all_inner_texts() == ["one", "two"]
    assert page.locator("pre.diff ins, pre.diff del").count() > 0  # issue SQL → submitted
    verdicts = page.locator("table.cases tbody tr")
    assert verdicts.count() >= 1 and set(verdicts.locator("td >> nth=1").all_inner_texts()) == {
        "passed"
    }
    # the issue SQL's episodes: a failing test case with its error, or no test at all when
    # the submission itself failed to execute (then its error), never a silent section
    links = tab.open("/tasks?col=0&outcome=failed").locator("tbody td:nth-child(4) a")
    seen = set()
    for href in [links.nth(i).get_attribute("href") for i in range(links.count())]:
        failed = tab.open(href.lstrip("#"))
        tests = failed.locator("section:has(h3:text('Hidden tests'))")
        if failed.locator("table.cases tr.fail").count():
            case = failed.locator("table.cases tr.fail >> nth=0")
            assert case.locator("pre.error-text").count() == 1, case.inner_text()
            seen.add("failing case")
        else:
            assert "No test ran" in tests.inner_text()
            assert tests.locator("pre.error-text").count() >= 1
            seen.add("no test ran")
    assert "failing case" in seen
    page = tab.open("/tasks?col=2&outcome=solved")
    tab.click("table.tasks tbody tr:first-child td.cell a >> nth=2")
    page.click("summary:has-text('Prompt')")
    assert page.locator("details[open] .msg.system").count() == 1
    infra = tab.open("/tasks?col=2&outcome=infra+error")
    tab.click("table.tasks tbody tr:first-child td.cell a >> nth=2")
    assert "endpoint timed out" in infra.inner_text("main")


def test_task_table_filters_and_searches(tab: Tab) -> None:
    page = tab.open("/tasks")
    rows = page.locator("table.tasks tbody tr")
    assert rows.count() == 9
    page.select_option("select[aria-label=category]", "Query")
    assert 0 < rows.count() < 9
    assert set(page.locator("table.tasks tbody td:nth-child(3)").all_inner_texts()) == {"Query"}
    page.select_option("select[aria-label=category]", "")
    page.fill("input[type=search]", "chinook_0")
    ids = page.locator("table.tasks td.id a").all_inner_texts()
    assert ids and all(i.startswith("chinook_0") for i in ids)
    page.fill("input[type=search]", "")
    page.select_option("select[aria-label=column]", "0")
    page.select_option("select[aria-label=outcome]", "solved")
    assert rows.count() == 0 and "0 of 9 tasks" in page.inner_text(".count")
    page.check("input[type=checkbox]")  # changed between stages
    page.select_option("select[aria-label=outcome]", "")
    assert rows.count() == 9  # every task changed somewhere (issue SQL → explorer)
    assert "changed=1" in page.url  # the filter is in the address, so it can be shared
    assert page.locator("td.cell.up").count() >= 9
    tab.healthy()


def test_grpo_groups_side_by_side(tab: Tab) -> None:
    page = tab.open("/groups")
    tab.healthy()
    assert page.locator("section.group").count() == 2
    assert page.locator(".completion").count() == 8
    assert (
        page.locator(".completion.pos").count() == 1
        and page.locator(".completion.neg").count() == 1
    )
    assert "no signal" in page.inner_text("section.group >> nth=1")
    # model text is text: the <b> it wrote shows as characters, not as bold markup
    assert page.locator(".completion b:text('not markup')").count() == 0
    assert "<b>not markup</b>" in page.inner_text(".completion >> nth=0")
    tab.shot("groups")
    page.select_option("select[aria-label=step]", "2")
    tab.ready()
    assert "step=2" in page.url and page.locator("section.group").count() == 2
    tab.healthy()


def test_compare_two_stages(tab: Tab) -> None:
    page = tab.open("/compare/0/1")
    tab.healthy()
    assert "fixed 9" in page.inner_text("main")
    tab.shot("compare")
    page = tab.click("table.tasks tbody tr:first-child a")
    tab.healthy()
    assert page.locator(".side .episode").count() == 2
    tab.shot("compare-episode")


def test_run_page_shows_every_split_with_intervals(browser: Any, tmp_path_factory: Any) -> None:
    """A run with a further held-out split: a table per split, SR and its change with 95%
    intervals, the exploring share, and stage 3's row saying it cannot learn to look."""
    site = build_view([make_run(tmp_path_factory.mktemp("splits"), easy_split=True)]).parent
    tab = Tab(browser, site)
    page = tab.open("/run")
    tab.healthy()
    headings = page.locator("h3.split").all_inner_texts()
    assert headings == ["Held-out tasks bundled:test", "Held-out split: easy bundled:test-easy"]
    tables = page.locator("table.stages")
    assert tables.count() == 2
    main, easy = tables.nth(0), tables.nth(1)
    assert main.locator("tbody tr").count() == 5 and easy.locator("tbody tr").count() == 2
    head = easy.locator("thead").inner_text()
    assert "SR [95% interval]" in head and "explored first [95% interval]" in head
    base, tuned = easy.locator("tbody tr").nth(0), easy.locator("tbody tr").nth(1)
    assert "single-turn GRPO · easy" in tuned.inner_text()
    assert tuned.locator("td.sr .interval").count() == 1
    assert tuned.locator("td.explored").inner_text().startswith("100.0% (6/6) [61.0, 100.0]")
    assert "cannot learn to look" in tuned.locator("td.explored").inner_text()
    assert base.locator("td.explored").inner_text().startswith("0.0% (0/6) [0.0, 39.0]")
    assert base.locator("td.change").inner_text() == "—"  # the split's first evaluation
    assert tuned.locator("td.change .interval").count() == 1
    charts = page.locator(".chart h4").all_inner_texts()
    assert "held-out evaluation per stage" in charts and "held-out split easy per stage" in charts
    tab.shot("run-splits")
    page = tab.click("table.stages >> nth=1 >> a:has-text('single-turn GRPO · easy')")
    tab.healthy()
    assert page.locator("table.tasks tbody tr").count() == 15  # both splits' tasks
    page.select_option("select[aria-label=outcome]", "not run")
    assert page.locator("table.tasks tbody tr").count() == 9  # the main split's tasks
    tab.page.close()


def test_charts_answer_the_pointer(tab: Tab) -> None:
    page = tab.open("/run")
    chart = page.locator(".chart:has(h4:text-is('reward'))")
    chart.locator("svg").hover()
    assert chart.locator(".tip").is_visible() and "step" in chart.locator(".tip").inner_text()
    page.select_option("select[aria-label='add a chart']", "learning_rate")
    assert page.locator(".chart h4:text-is('learning_rate')").count() == 1
    tab.healthy()


def test_the_checks_fail_on_a_throwing_script_or_a_blank_page(
    browser: Any, site: Path, tmp_path: Path
) -> None:
    broken = tmp_path / "broken"
    shutil.copytree(site, broken)
    app = broken / "app.js"
    app.write_text(
        app.read_text().replace("function runPage() {", "function runPage() { null.boom;")
    )
    tab = Tab(browser, broken)
    tab.open("/run")
    with pytest.raises(AssertionError):
        tab.healthy()
    blank = tmp_path / "blank"
    shutil.copytree(site, blank)
    (blank / "data" / "index.js").unlink()
    tab = Tab(browser, blank)
    tab.page.goto(f"{blank.resolve().as_uri()}/index.html#/run")
    tab.page.wait_for_selector("main .failure")
    assert "did not load" in tab.page.inner_text("main")
    with pytest.raises(AssertionError):
        tab.healthy()

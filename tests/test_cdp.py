"""The DevTools-protocol driver the UI benchmark times with (``tsexplore.testing.cdp``).

Drives a real headless Chromium: script evaluation with arguments and awaited promises, an
init script that runs before the page's own, key presses reaching the focused element,
errors from the page, and a screenshot. Without chromium this skips locally and FAILS under
CI (``CI=true``), like the browser test.
"""

from __future__ import annotations

import os
import urllib.parse

import pytest

from tsexplore.testing.cdp import CdpError, chromium_cdp
from tsexplore.testing.lab import find_chromium

PAGE = """<!doctype html><title>cdp</title>
<input id="box" value="">
<script>
  window.keys = [];
  document.getElementById('box').addEventListener('keydown', e => window.keys.push(e.key));
  window.seenInit = window.__init === 42;
</script>"""


pytestmark = pytest.mark.browser


@pytest.fixture
def page(tmp_path):
    if find_chromium() is None:
        msg = "chromium is not installed (apt-get install chromium)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true but {msg}")
        pytest.skip(msg)
    with chromium_cdp(tmp_path / "profile", 800, 600) as p:
        p.add_init_script("window.__init = 42;")
        p.goto("data:text/html," + urllib.parse.quote(PAGE))
        p.wait_for("document.readyState === 'complete' && window.keys !== undefined", timeout=30)
        yield p


def test_evaluate_call_and_init_script(page):
    assert page.evaluate("1 + 2") == 3
    assert page.call("(a, b) => a.x * b", {"x": 6}, 7) == 42
    assert page.evaluate("new Promise(r => setTimeout(() => r('late'), 50))") == "late"
    assert page.evaluate("window.seenInit") is True  # ran before the page's own script
    assert page.evaluate("[innerWidth, innerHeight]") == [800, 600]


def test_keys_reach_the_focused_element(page):
    page.call("() => document.getElementById('box').focus()")
    page.press("ArrowRight")
    page.press("ArrowLeft")
    assert page.evaluate("window.keys") == ["ArrowRight", "ArrowLeft"]


def test_page_errors_and_timeouts_are_reported(page):
    with pytest.raises(CdpError, match="boom"):
        page.evaluate("(() => { throw new Error('boom'); })()")
    with pytest.raises(TimeoutError, match="never"):
        page.wait_for("window.never === 1", timeout=0.5, poll=0.1)
    with pytest.raises(TimeoutError, match="last error: .*nope is not defined"):
        page.wait_for("nope.x", timeout=0.5, poll=0.1)


def test_screenshot_is_a_png(page, tmp_path):
    out = tmp_path / "shot.png"
    page.screenshot(out)
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 1000

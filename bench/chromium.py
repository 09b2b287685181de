"""Headless Debian chromium for the browser tests, the app benchmark (`python -m bench app`),
docs/make_images.py and .ci/first_touch.py: one launcher, one wait."""

from __future__ import annotations

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def launch(playwright):
    """Debian's chromium through Playwright with the flags above."""
    return playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)


def wait_idle(page, timeout: float = 60_000) -> None:
    """Wait until Streamlit has finished the current run (no 'running' status widget, nothing stale)."""
    page.wait_for_selector("[data-testid=stApp]")
    page.wait_for_function(
        "() => !document.querySelector('[data-testid=stStatusWidget]')"
        " && document.querySelectorAll('[data-stale=true]').length === 0",
        timeout=timeout,
    )

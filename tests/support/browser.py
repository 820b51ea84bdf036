"""A real browser for the tests: Debian's ``chromium`` driven by Playwright, and pages to load.

Chromium comes from the project's own setup (``tests/system/install-packages``); without
root and without it, the tests skip saying how to install it. Screenshots go to
``tests/artifacts/``.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from playwright.async_api import BrowserContext, ViewportSize, async_playwright, expect

from tests.system import require_packages

ROOT = Path(__file__).resolve().parent.parent.parent
ARTIFACTS = ROOT / "tests" / "artifacts"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
WAIT_MS = 10_000  # every browser-side wait is bounded by this
VIEWPORT = ViewportSize(width=1100, height=640)
expect.set_options(timeout=WAIT_MS)

# A handler answers a GET path with (status, content type, body), or None for 404.
Answer = tuple[int, str, bytes]
Handler = Callable[[str], Answer | None]


def require_chromium() -> str:
    """Debian's chromium, installed by the project's test setup if missing."""
    require_packages("chromium", commands=("chromium",))
    return CHROMIUM


@asynccontextmanager
async def browser(
    executable: str, profile: Path, viewport: ViewportSize = VIEWPORT
) -> AsyncIterator[BrowserContext]:
    """A headless Chromium with a fresh profile, closed at the end of the block."""
    async with async_playwright() as playwright:
        context = await playwright.chromium.launch_persistent_context(
            str(profile),
            executable_path=executable,
            args=CHROMIUM_ARGS,
            headless=True,
            viewport=viewport,
            timeout=WAIT_MS * 3,
        )
        context.set_default_timeout(WAIT_MS)
        try:
            yield context
        finally:
            await context.close()


def save_artifact(png: bytes, name: str) -> Path:
    """Keep a screenshot in tests/artifacts/."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / name
    path.write_bytes(png)
    return path


@contextmanager
def page_server(handler: Handler) -> Iterator[str]:
    """A loopback HTTP server (its own origin) answering GETs with ``handler``; its base URL."""

    class Pages(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            answer = handler(self.path)
            status, kind, body = answer or (404, "text/plain", b"not found\n")
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Pages)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)

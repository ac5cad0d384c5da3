"""Take the getting-started page's screenshot from a real demo report, in headless Chromium.

    .venv/bin/python docs/_gen/screenshot.py .cache/demo/report.html docs/assets/demo-report.png

The top of the page at 1,200 px wide: the verdict, the summary table and the learning curve. The report loads
nothing (its Content-Security-Policy forbids it), so the page is the file alone.
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from playwright.async_api import async_playwright

from dreamgym.bridge import CHROMIUM_ARGS, find_chromium


async def shoot(report: Path, out: Path, *, width: int, height: int) -> None:
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=str(find_chromium()), args=list(CHROMIUM_ARGS))
        page = await browser.new_page(viewport={"width": width, "height": height})
        await page.goto(report.resolve().as_uri())
        out.parent.mkdir(parents=True, exist_ok=True)
        await page.screenshot(path=str(out), full_page=False)
        await browser.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("report", type=Path, help="a demo's report.html")
    parser.add_argument("out", type=Path, help="the PNG to write")
    parser.add_argument("--width", type=int, default=1200)
    parser.add_argument("--height", type=int, default=1000)
    args = parser.parse_args()
    asyncio.run(shoot(args.report, args.out, width=args.width, height=args.height))
    print(f"wrote {args.out} ({args.out.stat().st_size:,} bytes)")


if __name__ == "__main__":
    main()

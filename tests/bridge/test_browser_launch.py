"""A browser that is slow to start: the pool tries again, and a browser that never starts is a clear BackendError.

The "slow" browser is a real executable: a shell script that hangs on its first calls (as Chromium does on a
machine too loaded to start it in time) and then runs the real Chromium with the arguments Playwright gave it.
"""

from __future__ import annotations

import stat
from pathlib import Path

import anyio
import pytest

from dreamgym.bridge import BrowserConfig, BrowserPool, find_chromium
from dreamgym.core import BackendError, ConfigError

pytestmark = pytest.mark.anyio


def stalling_chromium(tmp_path: Path, *, stalls: int) -> tuple[Path, Path]:
    """(an executable that hangs on its first ``stalls`` starts and then runs the real Chromium, its log of starts)."""
    calls = tmp_path / "starts.log"
    script = tmp_path / "chromium"
    script.write_text(
        "#!/bin/sh\n"
        f'echo start >> "{calls}"\n'
        f'if [ "$(wc -l < "{calls}")" -le {stalls} ]; then exec sleep 600; fi\n'
        f'exec "{find_chromium()}" "$@"\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script, calls


async def test_a_launch_that_stalls_is_tried_again(tmp_path: Path) -> None:
    script, calls = stalling_chromium(tmp_path, stalls=1)
    # 10 s: the stalled start costs that much; the real one, about 0.3 s idle, has room on a loaded machine
    config = BrowserConfig(executable=str(script), processes=1, launch_timeout_s=10, launch_attempts=2)
    async with BrowserPool(config) as pool:
        async with pool.context() as lease:
            page = await lease.context.new_page()
            await page.set_content("<p>started</p>")
            assert await page.inner_text("p") == "started"
        assert pool.launches == 1  # the stalled start is not a launch
    assert calls.read_text().count("start") == 2


async def test_a_browser_that_never_starts_is_a_backend_error_naming_every_attempt(tmp_path: Path) -> None:
    script, calls = stalling_chromium(tmp_path, stalls=99)
    config = BrowserConfig(executable=str(script), processes=1, launch_timeout_s=1, launch_attempts=2)
    async with BrowserPool(config) as pool:
        with anyio.fail_after(60), pytest.raises(BackendError, match=r"did not start in 2 attempt\(s\)") as caught:
            await pool.open_context()
        assert "attempt 1:" in str(caught.value) and "attempt 2:" in str(caught.value)
        assert pool.launches == 0
    assert calls.read_text().count("start") == 2


@pytest.mark.parametrize("field", [{"launch_attempts": 0}, {"launch_timeout_s": 0.0}])
def test_launch_settings_out_of_range_are_config_errors(field: dict[str, float]) -> None:
    with pytest.raises(ConfigError, match="launch_attempts"):
        BrowserConfig(**field)  # type: ignore[arg-type]

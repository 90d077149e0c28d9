"""The UI process never imports torch: torch lives in the evaluator's worker process.

Checked in fresh interpreters, since the test process itself may have imported torch.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest


def _run(code: str, timeout: float = 120) -> str:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True, text=True, timeout=timeout, check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_importing_the_app_does_not_import_torch():
    out = _run("""
        import sys
        import tutor.ui.app
        import tutor.ui.screens.confirm, tutor.ui.screens.explain, tutor.ui.screens.help
        import tutor.ui.screens.training, tutor.ui.commands
        import tutor.ui.screens.welcome, tutor.ui.screens.completion, tutor.ui.screens.progress
        import tutor.ui.screens.lesson, tutor.ui.screens.packs
        print(sorted(m for m in sys.modules if m == "torch" or m.startswith("torch.")))
    """)
    assert out == "[]"


@pytest.mark.slow
def test_running_a_check_in_the_app_does_not_import_torch(tmp_path):
    out = _run(f"""
        import asyncio, sys, time
        from pathlib import Path
        from tutor.config import Settings
        from tutor.ui.app import TutorApp

        async def main():
            app = TutorApp(Settings(device="cpu", home=Path({str(tmp_path)!r})), greet=False)
            async with app.run_test() as pilot:
                deadline = time.monotonic() + 60
                while app.info is None and time.monotonic() < deadline:
                    await pilot.pause(0.05)
                app.query_one("#editor").load_text(
                    "dlogprobs = torch.zeros_like(logprobs)\\n"
                    "dlogprobs[range(n), Yb] = -1.0/n\\n")
                await pilot.press("ctrl+j")
                while app.lesson.checking and time.monotonic() < deadline:
                    await pilot.pause(0.05)
                print(app.store.status("atomic/logprobs"))
        asyncio.run(main())
        print("torch" in sys.modules)
    """)
    assert out.splitlines() == ["exact", "False"]


# What the chooser's first frame must not wait for: every command's module, the lesson screen
# and its widgets, the progress store, a training run's computation.
NOT_BEFORE_THE_CHOOSER = ("tutor.commands", "tutor.ui.screens.lesson", "tutor.session.store",
                          "tutor.session.controller", "tutor.training.run")


def test_plain_backprop_tutor_reaches_the_chooser_without_what_it_does_not_show(tmp_path):
    out = _run(f"""
        import sys
        import tutor.ui.app
        from tutor.ui.app import TutorApp

        def run_app(settings, packs=None):
            TutorApp(settings, packs=["makemore", "gpt"])  # the chooser's app, not run
            import tutor.ui.screens.packs
            print(sorted(m for m in sys.modules if m.startswith({NOT_BEFORE_THE_CHOOSER!r})))
            return 0

        tutor.ui.app.run_app = run_app
        from tutor.cli import main
        raise SystemExit(main(["--home", {str(tmp_path)!r}]))
    """)
    assert out == "[]"

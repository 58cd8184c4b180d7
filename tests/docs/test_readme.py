"""The README's first screen says what kappaflow is, how to install it and the two commands (set up and
run the example; run every test) before any contributor requirement, and those commands are the ones the
Makefile and CI run."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIRST_SCREEN = 25  # lines


def test_first_screen_has_what_it_is_install_and_the_two_commands_before_requirements() -> None:
    text = (ROOT / "README.md").read_text()
    screen = "\n".join(text.splitlines()[:FIRST_SCREEN])
    assert "Kafka Streams for Python" in screen
    install = screen.index("pip install .")
    run = screen.index("\nmake run ")
    test = screen.index("\nmake test ")
    assert install < run < test
    for requirement in ("Go 1.26", "cargo", "Rust"):
        assert requirement not in screen, requirement
        assert text.index(requirement) > test, requirement


def test_the_two_commands_are_the_makefile_targets_ci_runs() -> None:
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^run: setup kafka-download$", makefile, re.MULTILINE)
    assert "examples/run_wordcount.py" in makefile
    assert re.search(r"^test: ", makefile, re.MULTILINE)
    assert (ROOT / ".ci" / "run").read_text().rstrip().endswith("make test")

"""The README's quick start says what it prints; run as written on the bundled pair, it prints that. The command line's
first two commands print the two sentences the README quotes, and the Python block prints its `prints` block line for
line (the statistics line included: greedy decoding is deterministic). The export is the bundled pair's, as the README
makes it (tests/conftest.py's bundled_export, which skips where models/ holds no trained pair)."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def _quick_start() -> str:
    text = README.read_text(encoding="utf-8")
    return text[text.index("## Quick start"):]


def _in_exported(tmp_path: Path, export: Path) -> Path:
    (tmp_path / "exported").symlink_to(export, target_is_directory=True)
    return tmp_path


def test_the_first_two_commands_print_what_the_readme_quotes(bundled_export, tmp_path):
    section = _quick_start()
    block = re.search(r"Command line:\n\n```bash\n(.*?)```", section, re.S).group(1)
    commands = [c for c in block.replace("\\\n", " ").splitlines() if c.startswith("specdec-generate")]
    quoted = re.search(r"The first two print `([^`]+)` and `([^`]+)`", section.replace("\n", " ")).groups()
    cwd = _in_exported(tmp_path, bundled_export)
    for command, want in zip(commands[:2], quoted):
        args = shlex.split(command)[1:]
        proc = subprocess.run([sys.executable, "-m", "specdec.runtime.tools.generate", *args, "--provider", "cpu"],
                              capture_output=True, text=True, cwd=cwd)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.strip() == want, (command, proc.stdout)
        assert proc.stderr.startswith("[cpu] "), proc.stderr          # the stats line


def test_the_python_block_prints_what_the_readme_shows(bundled_export, tmp_path):
    section = _quick_start()
    code, shown = re.search(r"Python:\n\n```python\n(.*?)```\n\nprints\n\n```\n(.*?)```", section, re.S).groups()
    cwd = _in_exported(tmp_path, bundled_export)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=cwd)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == shown, f"README.md's Python block prints\n{proc.stdout}\nbut the README shows\n{shown}"


def test_the_command_line_guide_shows_what_its_second_command_prints(bundled_export, tmp_path):
    """docs/guides/cli.md's sample statistics (wrapped there) are its second command's on the bundled pair: every
    count and ratio as printed; the times are this machine's."""
    page = (README.parent / "docs" / "guides" / "cli.md").read_text(encoding="utf-8")
    block = re.search(r"```bash\n(specdec-generate.*?)```", page, re.S).group(1).splitlines()
    prompt = shlex.split(block[1].split("=", 1)[1])[0]
    args = shlex.split(block[2].replace("\"$P\"", ""))[1:]
    sample = re.search(r"second command above.*?```\n(.*?)```", page, re.S).group(1)
    shown = re.sub(r"\n\s{4,}", " ", sample.strip()).replace("  ", " ").splitlines()

    def counts(line: str) -> str:
        line = re.sub(r"in [\d.]+ ms \([\d.]+ ms/token\)", "in T", line.strip())
        return re.sub(r"time: encoder [\d.]+ ms, draft runs [\d.]+, target runs [\d.]+, host [\d.]+;", "time: T;", line)

    cwd = _in_exported(tmp_path, bundled_export)
    proc = subprocess.run([sys.executable, "-m", "specdec.runtime.tools.generate", *args, prompt, "--provider", "cpu"],
                          capture_output=True, text=True, cwd=cwd)
    assert proc.returncode == 0, proc.stderr
    assert [counts(line) for line in proc.stderr.splitlines()] == [counts(line) for line in shown], proc.stderr

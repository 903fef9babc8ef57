"""The classroom labs (docs/labs/lab*.md) run as written: every command block marked for testing
is extracted and run, so a handout cannot rot.

How a handout marks its commands (docs/labs/README.md, "For maintainers", says the same):

- A fenced block whose info string is ``bash test`` is run by the pure tier; ``bash test
  emulation`` marks a block that needs root and Open vSwitch (``sudo python -m emulation.run``)
  or reads what such a block wrote. Plain ``bash`` blocks (``vagrant up``) are not run.
- HTML comments directly above a test block adjust it (students do not see them):
  ``<!-- test-sub: OLD => NEW -->`` replaces the literal text OLD (which must occur) by NEW, to
  run on smaller sizes; ``<!-- test-creates: FILE ... -->`` lists files the block must leave
  (relative to the lab's working directory); ``<!-- test-stdout: REGEX -->`` must match the
  block's standard output.
- A leading ``sudo `` on a line is dropped (the emulation tests run as root).

Each lab's blocks run in order, in one temporary directory, through ``bash -e -o pipefail``
with this interpreter's directory first on PATH (so ``python`` is the venv's). The pure test
runs a lab's ``bash test`` blocks; the emulation test runs all its test blocks, since later
pure blocks may read what the emulation wrote.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from traffic.runner import time_scale

ROOT = Path(__file__).resolve().parents[1]
LABS_DIR = ROOT / "docs" / "labs"
LABS = sorted(LABS_DIR.glob("lab*.md"))

#: Sections every handout has, as second-level headings (prefix match).
SECTIONS = ("Goal", "Set-up", "Steps", "What you hand in", "Questions", "Instructor notes")

#: Labs whose test takes more than ~30 s here (measured on the 2-core machine), by tier.
SLOW = {
    ("lab2-contention", "emulation"),
    ("lab3-sim-vs-emu", "emulation"),
    ("lab4-learning", "pure"),
    ("lab4-learning", "emulation"),
}

#: A block's time limit, times ARTB_TIME_SCALE (``traffic.runner.time_scale``).
BLOCK_TIMEOUT_S = 600.0 * time_scale()

FENCE = re.compile(r"^(`{3,})\s*(.*)$")
DIRECTIVE = re.compile(r"^<!--\s*(test-[a-z]+):\s*(.*?)\s*-->$")
SUDO = re.compile(r"^(\s*)sudo\s+", re.MULTILINE)


class LabFormatError(ValueError):
    """A handout's test markup is malformed."""


@dataclass
class Block:
    """One fenced command block marked for testing."""

    lab: str
    line: int
    code: str
    emulation: bool
    subs: list[tuple[str, str]] = field(default_factory=list)
    creates: list[str] = field(default_factory=list)
    stdout: list[str] = field(default_factory=list)

    def script(self) -> str:
        """The bash script the test runs: substitutions applied, leading sudo dropped."""
        code = self.code
        for old, new in self.subs:
            if old not in code:
                raise LabFormatError(f"{self.lab}:{self.line}: test-sub text {old!r} is not "
                                     "in the block")
            code = code.replace(old, new)
        return SUDO.sub(r"\1", code)


def parse(path: Path) -> list[Block]:
    """The test blocks of one handout, in order; LabFormatError on malformed markup."""
    lab = path.stem
    blocks: list[Block] = []
    pending: dict[str, list] = {"subs": [], "creates": [], "stdout": []}
    pending_line = 0
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        text = lines[i].strip()
        fence = FENCE.match(text)
        directive = DIRECTIVE.match(text)
        if directive:
            key, value = directive.groups()
            if key == "test-sub":
                if " => " not in value:
                    raise LabFormatError(f"{lab}:{i + 1}: test-sub needs 'OLD => NEW'")
                old, new = value.split(" => ", 1)
                pending["subs"].append((old, new))
            elif key == "test-creates":
                pending["creates"].extend(shlex.split(value))
            elif key == "test-stdout":
                re.compile(value)
                pending["stdout"].append(value)
            else:
                raise LabFormatError(f"{lab}:{i + 1}: unknown directive {key!r}")
            pending_line = pending_line or i + 1
            i += 1
            continue
        if fence:
            ticks, info = fence.groups()
            words = info.split()
            end = next((j for j in range(i + 1, len(lines))
                        if lines[j].strip() == ticks), None)
            if end is None:
                raise LabFormatError(f"{lab}:{i + 1}: unclosed code block")
            code = "\n".join(lines[i + 1:end]) + "\n"
            if "test" in words:
                extra = set(words) - {"bash", "test", "emulation"}
                if words[0] != "bash" or extra:
                    raise LabFormatError(f"{lab}:{i + 1}: a test block's info string is "
                                         f"'bash test' or 'bash test emulation', not {info!r}")
                blocks.append(Block(lab, i + 1, code, "emulation" in words, **pending))
            elif any(pending.values()):
                raise LabFormatError(f"{lab}:{pending_line}: test directives above a block "
                                     "that is not marked 'test'")
            pending = {"subs": [], "creates": [], "stdout": []}
            pending_line = 0
            i = end + 1
            continue
        if text and any(pending.values()):
            raise LabFormatError(f"{lab}:{pending_line}: test directives must sit directly "
                                 "above a test block")
        i += 1
    if any(pending.values()):
        raise LabFormatError(f"{lab}:{pending_line}: test directives after the last block")
    return blocks


def run_blocks(blocks: list[Block], workdir: Path) -> list[tuple[Block, float]]:
    """Run blocks in order in workdir; fail the test at the first block that goes wrong."""
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["MPLBACKEND"] = "Agg"
    timings = []
    for block in blocks:
        script = block.script()
        started = time.monotonic()
        try:
            done = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", script], cwd=workdir,
                                  env=env, capture_output=True, text=True,
                                  timeout=BLOCK_TIMEOUT_S, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{block.lab}:{block.line}: block still running after "
                        f"{BLOCK_TIMEOUT_S:.0f} s:\n{script}")
        seconds = time.monotonic() - started
        timings.append((block, seconds))
        where = (f"{block.lab}:{block.line} ({seconds:.1f} s)\n--- script\n{script}"
                 f"--- stdout (tail)\n{done.stdout[-3000:]}\n--- stderr (tail)\n"
                 f"{done.stderr[-3000:]}")
        assert done.returncode == 0, f"exit {done.returncode}: {where}"
        missing = [f for f in block.creates if not (workdir / f).exists()]
        assert not missing, f"files not created: {missing}: {where}"
        for pattern in block.stdout:
            assert re.search(pattern, done.stdout, re.MULTILINE), \
                f"stdout does not match {pattern!r}: {where}"
    return timings


def lab_params(tier: str) -> list:
    """One pytest param per lab that has blocks of ``tier`` ("pure": a ``bash test`` block;
    "emulation": a ``bash test emulation`` block), marked slow where SLOW says so."""
    params = []
    for path in LABS:
        if not any(b.emulation == (tier == "emulation") for b in parse(path)):
            continue
        marks = [pytest.mark.slow] if (path.stem, tier) in SLOW else []
        if tier == "emulation":
            marks.append(pytest.mark.emulation)
        params.append(pytest.param(path, id=path.stem, marks=marks))
    return params


def test_there_are_four_labs_and_the_index_links_them():
    assert len(LABS) == 4, [p.name for p in LABS]
    index = (LABS_DIR / "README.md").read_text()
    for path in LABS:
        assert f"({path.name})" in index, f"docs/labs/README.md does not link {path.name}"


@pytest.mark.parametrize("path", LABS, ids=[p.stem for p in LABS])
def test_lab_is_well_formed(path: Path):
    text = path.read_text()
    headings = re.findall(r"^## (.+)$", text, re.MULTILINE)
    for section in SECTIONS:
        assert any(h.startswith(section) for h in headings), \
            f"{path.name} has no '## {section}' section (has {headings})"
    blocks = parse(path)
    assert blocks, f"{path.name} marks no block for testing"
    for block in blocks:
        block.script()  # every test-sub applies
        needs_root = "emulation.run" in block.code or SUDO.search(block.code)
        assert block.emulation or not needs_root, \
            f"{block.lab}:{block.line}: runs the emulation or sudo but is not 'bash test emulation'"
        assert "sudo" not in block.script(), \
            f"{block.lab}:{block.line}: 'sudo' must start its line so the test can drop it"


def test_parse_reads_directives_and_refuses_dangling_ones(tmp_path: Path):
    good = tmp_path / "good.md"
    good.write_text("# x\n\n<!-- test-sub: --size-mb 1 => --size-mb 0.1 -->\n"
                    "<!-- test-creates: a.json b.png -->\n```bash test emulation\n"
                    "sudo python -m emulation.run --size-mb 1\n```\n\n```bash\nvagrant up\n```\n")
    [block] = parse(good)
    assert block.emulation and block.creates == ["a.json", "b.png"]
    assert block.script() == "python -m emulation.run --size-mb 0.1\n"
    bad = tmp_path / "bad.md"
    bad.write_text("<!-- test-creates: a -->\nsome text\n```bash test\ntrue\n```\n")
    with pytest.raises(LabFormatError, match="directly above"):
        parse(bad)
    bad.write_text("<!-- test-sub: nothere => x -->\n```bash test\ntrue\n```\n")
    with pytest.raises(LabFormatError, match="not in the block"):
        parse(bad)[0].script()


@pytest.mark.parametrize("path", lab_params("pure"))
def test_lab_pure_commands_run(path: Path, tmp_path: Path):
    run_blocks([b for b in parse(path) if not b.emulation], tmp_path)


@pytest.mark.parametrize("path", lab_params("emulation"))
def test_lab_all_commands_run(path: Path, tmp_path: Path):
    run_blocks(parse(path), tmp_path)

"""The README's and the docs' Python code blocks run as written (each in a fresh process, in a scratch
folder), and the TRL guide names every ``cost_aware_*`` field of the config."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def python_blocks() -> list[tuple[str, int, str]]:
    """(page, block number, code) of every ```python block."""
    return [
        (p.relative_to(ROOT).as_posix(), k, code) for p in PAGES for k, code in enumerate(FENCE.findall(p.read_text()))
    ]


BLOCKS = python_blocks()


def _is_quickstart(page: str, code: str) -> bool:
    return page == "README.md" and "CostAwareGRPOTrainer" in code


def shown_output(page: str, code: str) -> list[str]:
    """The lines of the ```text block that follows ``code`` on ``page`` (what the page says it prints)."""
    text = (ROOT / page).read_text()
    after = text[text.index(code) + len(code) :]
    found = re.search(r"^```text\n(.*?)^```", after, re.S | re.M)
    assert found is not None, f"{page}: no ```text block after the quickstart"
    return found.group(1).splitlines()


def _shape(line: str) -> str:
    """A printed line with its numbers masked: their values move with the torch build, the line's form not."""
    return re.sub(r"\d+(\.\d+)?", "#", line)


def test_the_readme_has_its_quickstart_block():
    quickstart = [(p, code) for p, _, code in BLOCKS if _is_quickstart(p, code)]
    assert len(quickstart) == 1
    # both arms, each with the tokens it fed (padding included) and its reward at the start and the end
    shown = shown_output(*quickstart[0])
    assert [ln.split(":")[0].strip() for ln in shown] == ["GRPO", "Cost-Aware GRPO (p*)"]
    assert all(re.search(r": fed \d+ policy-optimisation tokens \(padding included\), reward [\d.]+ -> [\d.]+$", ln)
               for ln in shown)  # fmt: skip


@pytest.mark.parametrize(("page", "k", "code"), BLOCKS, ids=[f"{p}#{k}" for p, k, _ in BLOCKS])
def test_code_block_runs(tmp_path, page, k, code):
    if "costaware.integrations.trl" in code:
        pytest.importorskip("trl", reason="the 'trl' extra is not installed")
    script = tmp_path / "block.py"
    script.write_text(code)
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]),
    }
    proc = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env
    )
    assert proc.returncode == 0, f"{page} block {k}:\n{proc.stdout[-2000:]}{proc.stderr[-3000:]}"
    if _is_quickstart(page, code):  # it prints what the README shows, up to the numbers' values
        assert [_shape(ln) for ln in proc.stdout.splitlines()] == [_shape(ln) for ln in shown_output(page, code)]


def test_the_trl_guide_names_every_config_field():
    pytest.importorskip("trl", reason="the 'trl' extra is not installed")
    import dataclasses

    from costaware.integrations.trl import CostAwareGRPOConfig

    guide = (ROOT / "docs" / "trl.md").read_text()
    names = [f.name for f in dataclasses.fields(CostAwareGRPOConfig) if f.name.startswith("cost_aware_")]
    assert names and [n for n in names if f"`{n}`" not in guide] == []


@pytest.mark.parametrize("page", ["README.md", "docs/verl.md", "examples/verl/README.md"])
def test_the_verl_turn_on_lines_get_the_saving_and_name_every_key(page):
    """Where a page says how to turn the verl plugin on, it sets ``calculate_log_probs=false`` (verl's default
    ``true`` keeps stock's log-prob passes) and names every ``algorithm.cost_aware`` key."""
    import dataclasses

    from costaware.integrations.verl.config import CostAwareConfig

    text = (ROOT / page).read_text()
    turn_on = text[text.index("python -m verl.trainer.main_ppo") :][:600]
    assert "actor_rollout_ref.rollout.calculate_log_probs=false" in turn_on
    names = [f.name for f in dataclasses.fields(CostAwareConfig)]
    assert [n for n in names if f"`{n}`" not in text] == []


def test_the_verl_example_config_sets_every_key_and_gets_the_saving():
    import dataclasses

    from costaware.integrations.verl.config import CostAwareConfig

    text = (ROOT / "examples" / "verl" / "cost_aware_grpo.yaml").read_text()
    block = text[text.index("  cost_aware:") : text.index("\ndata:")]
    names = [f.name for f in dataclasses.fields(CostAwareConfig)]
    assert [n for n in names if f"\n    {n}:" not in block] == []
    assert "\n    calculate_log_probs: false" in text

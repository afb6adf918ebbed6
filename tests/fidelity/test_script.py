"""scripts/credit_fidelity.py --quick runs end to end, keeps hand-written text, is reproducible."""

import importlib.util
import re
from pathlib import Path

from agentrl import credit
from agentrl.fidelity import report
from agentrl.fidelity.modules import LEFT_OUT

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "credit_fidelity.py"


def _main():
    spec = importlib.util.spec_from_file_location("credit_fidelity_script", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _strip(text: str) -> str:
    return re.sub(r"Command: .*\n", "", text)


def test_quick_mode_writes_report_and_plots(tmp_path):
    main = _main().main
    out = tmp_path / "report.md"
    out.write_text("# Mine\n\nhand-written intro\n", encoding="utf-8")
    assert main(["--quick", "--out", str(out)]) == 0
    text = out.read_text(encoding="utf-8")
    assert text.startswith("# Mine\n\nhand-written intro\n")
    for name in credit.available():
        assert f"`{name}`: " in text  # every registered module has a status line...
        if name not in LEFT_OUT:
            assert f"| {name} |" in text  # ...and rows in the tables
    assert (tmp_path / "credit-fidelity-correlation.png").stat().st_size > 10_000
    assert (tmp_path / "credit-fidelity-learning.png").stat().st_size > 10_000
    # A rerun replaces the generated block instead of appending a second one.
    assert main(["--quick", "--out", str(out), "--no-plots"]) == 0
    again = out.read_text(encoding="utf-8")
    assert again.count(report.BEGIN) == 1 and again.startswith("# Mine")
    assert again.count(report.HIPER_BEGIN) == 1 and "| hiper[exact] action | A_low |" in again


def test_hiper_section_alone_keeps_the_rest(tmp_path):
    main = _main().main
    out = tmp_path / "report.md"
    main(["--quick", "--no-plots", "--out", str(out), "--sections", "main"])
    before = out.read_text(encoding="utf-8")
    assert report.HIPER_BEGIN not in before
    assert main(["--quick", "--out", str(out), "--sections", "hiper"]) == 0
    after = out.read_text(encoding="utf-8")
    assert after.startswith(before.rstrip()) and report.HIPER_BEGIN in after


def test_quick_mode_is_reproducible(tmp_path):
    main = _main().main
    a, b = tmp_path / "a.md", tmp_path / "b.md"
    main(["--quick", "--no-plots", "--out", str(a), "--seed", "3"])
    main(["--quick", "--no-plots", "--out", str(b), "--seed", "3"])
    assert _strip(a.read_text()) == _strip(b.read_text())

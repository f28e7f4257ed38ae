"""bench/ruler_table.py: the RULER tables drawn from a kvpress-layout CSV (the mean over the tasks
and its standard error, the per-task cells, the marking of a cell that lacks a task)."""
import importlib.util
import math

from conftest import ROOT

spec = importlib.util.spec_from_file_location("ruler_table", ROOT / "bench" / "ruler_table.py")
ruler_table = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ruler_table)

CSV = """model,method,compression_ratio,task,score,setting,context_length,score_se,samples
q,no_press,0.000,vt,100.00,agnostic,4096,0.00,5
q,kvzip,0.250,vt,80.00,agnostic,4096,20.00,5
q,kvzip,0.875,vt,20.00,agnostic,4096,12.00,5
q,no_press,0.000,fwe,60.00,agnostic,4096,10.00,5
q,kvzip,0.250,fwe,40.00,agnostic,4096,15.00,5
"""


def rows(tmp_path, text=CSV):
    p = tmp_path / "k.csv"
    p.write_text(text)
    return ruler_table.read_rows(str(p))


def test_mean_over_tasks_and_its_standard_error():
    cells = [{"score": 80.0, "score_se": 20.0}, {"score": 40.0, "score_se": 15.0}]
    mean, se = ruler_table.mean_se(cells)
    assert mean == 60.0
    assert math.isclose(se, math.sqrt(20.0 ** 2 + 15.0 ** 2) / 2)  # 12.5


def test_method_by_ratio_table(tmp_path):
    out = ruler_table.render(rows(tmp_path))
    lines = out.splitlines()
    assert "| method | 0 | 0.25 | 0.875 |" in lines
    assert "| no_press | 80.0 ± 5.0 | – | – |" in lines  # sqrt(0 + 10^2) / 2
    # 0.875 has vt only: its mean is vt's, marked as one task of two.
    assert "| kvzip | – | 60.0 ± 12.5 | 20.0 ± 12.0 (1/2 tasks) |" in lines
    assert "mean over 2 tasks" in out and "5 samples per task" in out


def test_per_task_table(tmp_path):
    lines = ruler_table.render(rows(tmp_path)).splitlines()
    assert "| method | removed | vt | fwe | samples |" in lines
    assert "| kvzip | 0.25 | 80.0 ± 20.0 | 40.0 ± 15.0 | 5 |" in lines
    assert "| kvzip | 0.875 | 20.0 ± 12.0 | – | 5 |" in lines
    # The full cache first, whatever the CSV's order.
    assert lines.index("| no_press | 0 | 100.0 ± 0.0 | 60.0 ± 10.0 | 5 |") < lines.index(
        "| kvzip | 0.25 | 80.0 ± 20.0 | 40.0 ± 15.0 | 5 |")


def test_one_sample_has_no_error(tmp_path):
    text = CSV.replace(",5\n", ",1\n")
    lines = ruler_table.render(rows(tmp_path, text)).splitlines()
    assert "| kvzip | 0.25 | 80.0 | 40.0 | 1 |" in lines

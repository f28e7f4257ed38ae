"""Shared fixtures of the Python package's tests: where the repository, the `kvzip` command and
the real model are, and small helpers to run the command."""
import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden"
DEFAULT_MODEL = pathlib.Path.home() / ".cache" / "kvzip" / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"


def kvzip_bin():
    """The `kvzip` the package installed next to this Python, else $KVZIP_BIN, else PATH."""
    here = pathlib.Path(sys.executable).parent / "kvzip"
    if here.exists():
        return str(here)
    return os.environ.get("KVZIP_BIN") or shutil.which("kvzip")


@pytest.fixture(scope="session")
def cli():
    path = kvzip_bin()
    assert path, "the kvzip command is missing: `pip install .` installs it next to python"

    def run(*args, check=True):
        r = subprocess.run([path, *map(str, args)], capture_output=True, text=True)
        if check and r.returncode != 0:
            raise AssertionError(f"kvzip {' '.join(map(str, args))} exited {r.returncode}: {r.stderr}")
        return r
    return run


@pytest.fixture(scope="session")
def model_path():
    p = pathlib.Path(os.environ.get("KVZIP_MODEL") or DEFAULT_MODEL)
    if not p.exists():
        pytest.fail(f"the default model {p} is missing; run scripts/fetch-model.sh")
    return p


def normans(paragraphs=None):
    """(document text, answerable questions) of the Normans article; `paragraphs`: a slice of them."""
    d = json.loads((ROOT / "examples" / "normans.json").read_text())
    ps = d["data"][0]["paragraphs"]
    ps = ps if paragraphs is None else ps[paragraphs]
    text = "\n\n".join(p["context"] for p in ps)
    qs = [q["question"] for p in ps for q in p["qas"] if not q.get("is_impossible")]
    return text, qs


def cli_answers(cli, cache, questions, *extra):
    r = cli("query", cache, *questions, "--json", "-q", *extra)
    return [json.loads(line)["answer"] for line in r.stdout.splitlines() if line.strip()]

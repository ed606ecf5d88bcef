"""Bad values on every option of `recipes`, `sweep` and `changelog`: one line naming the option or file, exit
code 2, never a traceback and never a silent default."""

import sys

import pytest

from servelab.cli.main import main

KEY = "dsv4-fp4-b200-vllm"


def cli(monkeypatch, capsys, *args):
    monkeypatch.setattr(sys, "argv", ["servelab", *args])
    with pytest.raises(SystemExit) as info:
        main()
    out, err = capsys.readouterr()
    return info.value.code, out, err


BAD = [
    *[
        (["recipes", "render", KEY, opt, value], f"{opt}: Input should be")
        for opt in ("--tp", "--ep", "--pp", "--isl", "--osl", "--port")
        for value in ("0", "-5", "99999999999999999999")
    ],
    (
        ["recipes", "render", KEY, "--tp", "8", "--ep", "0"],
        "--ep: Input should be greater than or equal to 1",
    ),
    (["recipes", "render", ""], "config key '' is not in"),
    (["recipes", "show", KEY, "--as", ""], "--as '': expected servelab"),
    *[
        (["sweep", opt, value], f"{opt}: Input should be")
        for opt in ("--min-conc", "--max-conc", "--max-tp", "--max-ep")
        for value in ("0", "-5", "99999999999999999999")
    ],
    (["sweep", "--max-jobs", "0"], "--max-jobs: Input should be greater than or equal to 1"),
    (["sweep", "--step-size", "1"], "--step-size: Input should be greater than or equal to 2"),
    (
        ["sweep", KEY, "--mode", "test-config", "--conc", "4,0"],
        "--conc: Input should be greater than or equal to 1",
    ),
    (["sweep", KEY, "--mode", "test-config", "--conc", "x"], "--conc: expected integers"),
    (["sweep", "--launcher", "podman"], "launcher 'podman': expected direct or docker"),
    (["sweep", "--format", ""], "output format '': expected json, github, buildkite, sh"),
    (["sweep", "--mode", ""], "--mode: Input should be 'full-sweep' or 'test-config'"),
    *[
        (["sweep", KEY, "--format", "slurm", opt, value], f"{opt}: {value!r} ")
        for opt, value in (
            ("--partition", "gpu long"),
            ("--partition", "gpu\n#SBATCH --x"),
            ("--account", "a;id"),
            ("--time", "3:00:00\ntouch x"),
            ("--sbatch-arg", "-p gpu"),
            ("--sbatch-arg", "--qos=a\nb"),
        )
    ],
    (["sweep", KEY, "--format", "slurm", "--sbatch-arg", "--array=1"], "servelab writes --array itself"),
    (["sweep", KEY, "--format", "sh", "--partition", "gpu"], "--partition: only --format slurm writes"),
    (["changelog", "validate", "--base-ref", "--output=/tmp/x", "--dir", "."], "git ref '--output=/tmp/x'"),
    (["changelog", "jobs", "--base-ref", "", "--dir", "."], "git ref ''"),
]


@pytest.mark.parametrize("args, message", BAD, ids=[" ".join(a)[:60] for a, _ in BAD])
def test_bad_option_values(monkeypatch, capsys, args, message):
    code, _, err = cli(monkeypatch, capsys, *args)
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1, err
    assert message in err


@pytest.fixture
def paths(tmp_path, store_dir):
    """Hostile paths: a directory, a missing file, a device, brackets in the name, an existing file."""
    (tmp_path / "br[a]").mkdir()
    bracketed = tmp_path / "br[a]" / "x.yaml"
    bracketed.write_text((store_dir / "recipes" / "b200.yaml").read_text())
    (tmp_path / "plain.txt").write_text("x\n")
    return {
        "dir": str(tmp_path),
        "missing": str(tmp_path / "missing.yaml"),
        "device": "/dev/zero",
        "bracketed": str(bracketed),
        "file": str(tmp_path / "plain.txt"),
        "store": str(store_dir),
    }


@pytest.mark.parametrize(
    "args, message",
    [
        (["recipes", "validate", "{dir}"], "{dir}: is a directory, expected a file"),
        (["recipes", "validate", "{missing}"], "{missing}: file not found"),
        (["recipes", "import", "{device}"], "/dev/zero: not a regular file"),
        (["recipes", "validate", ""], ".: is a directory, expected a file"),
        (["recipes", "list", "--dir", "{missing}"], "recipes dir {missing} does not exist"),
        (["sweep", "--out", "{dir}"], "{dir}: cannot write (Is a directory)"),
        (["sweep", "--format", "sh", "--out", "{file}"], "{file}: not a directory"),
        (["sweep", "--format", "json", "--out", "{file}/x.json"], "{file}/x.json: cannot write"),
    ],
    ids=lambda v: v if isinstance(v, str) else " ".join(v)[:40],
)
def test_bad_paths(monkeypatch, capsys, paths, args, message):
    code, _, err = cli(monkeypatch, capsys, *[a.format(**paths) for a in args])
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1, err
    assert message.format(**paths) in err


def test_brackets_in_paths_are_plain_characters(monkeypatch, capsys, paths, store_dir, tmp_path):
    code, out, err = cli(
        monkeypatch, capsys, "recipes", "validate", paths["bracketed"], "--dir", paths["store"]
    )
    assert code == 0 and "ok   dsv4-fp4-b200-vllm" in out, err
    store = store_dir.rename(tmp_path / "st[x]")
    out_dir = str(store / "s[1]")
    code, out, err = cli(
        monkeypatch, capsys, "sweep", KEY, "--dir", str(store), "--out", out_dir, "--format", "sh"
    )
    assert code == 0 and len(out.split()) == 14 and all("/s[1]/" in line for line in out.split()), err

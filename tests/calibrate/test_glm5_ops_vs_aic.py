"""accuracy/glm5_ops_vs_aic.py: GLM-5's per-op prices against AIConfigurator's measured SGLang tables,
read from AIConfigurator's git history at a pinned commit. The tables are not in this repository, so these
tests check what it says when it cannot read them (docs/accuracy.md, "GLM-5 on B200: where the time goes")."""

import subprocess

from tests.accuracy_python import ACCURACY, run_accuracy_python

SCRIPT = str(ACCURACY / "glm5_ops_vs_aic.py")


def test_a_folder_that_is_not_a_git_directory_is_one_line_and_exit_2(tmp_path):
    err = run_accuracy_python([SCRIPT, "--aic-git-dir", str(tmp_path)], returncode=2)
    assert err.strip() == f"--aic-git-dir: {tmp_path} is not a git directory (expected a HEAD file there)"


def test_a_git_directory_without_the_pinned_commit_is_one_line_and_exit_2(tmp_path):
    git_dir = tmp_path / "aic.git"
    subprocess.run(["git", "init", "--quiet", "--bare", str(git_dir)], check=True)
    err = run_accuracy_python([SCRIPT, "--aic-git-dir", str(git_dir), "--system", "h200_sxm"], returncode=2)
    assert err.strip() == "--aic-git-dir: no GLM-5 DSA or MoE table of h200_sxm at commit 095f58a51"

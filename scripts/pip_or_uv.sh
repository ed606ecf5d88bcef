# Sourced by scripts/setup_vllm_cpu.sh: `install ARGS...` installs into "$venv" with its pip, or with uv where the
# caller names an installer that runs `uv pip install` with its options (SERVELAB_UV_INSTALL: .ci/run's): the
# same distributions, fetched and unpacked in parallel, and no bytecode compiled ahead (Python compiles what
# a process imports, once). `fresh_pip` upgrades the venv's own pip, which uv does not need.
install() {
  if [ -n "${SERVELAB_UV_INSTALL:-}" ]; then
    "$SERVELAB_UV_INSTALL" --quiet --python "$venv/bin/python" "$@"
  else
    "$venv/bin/python" -m pip install --quiet "$@"
  fi
}

fresh_pip() {
  [ -n "${SERVELAB_UV_INSTALL:-}" ] || "$venv/bin/python" -m pip install --quiet --upgrade pip
}
# (scripts/setup_bfcl.sh keeps pip: where a version lies on several indexes uv takes the first index's files,
# and there soundfile's wheel without its libsndfile, which bfcl-eval cannot import.)

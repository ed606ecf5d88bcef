# servelab capture stub of InferenceX's benchmark_lib.sh: the servers are stubs, so nothing waits or runs.
trap wait EXIT
check_env_vars() {
    local v
    for v in "$@"; do [[ -n "${!v:-}" ]] || { echo "missing $v" >&2; exit 1; }; done
}
wait_for_server_ready() { wait; }
start_gpu_monitor() { :; }
stop_gpu_monitor() { :; }
run_benchmark_serving() { printf '%s\0' "$@" > "$SERVELAB_BENCH_CAPTURE"; }
run_eval() { :; }
append_lm_eval_summary() { :; }
setup_eval_context() { :; }
compute_eval_context_length() { echo "$2"; }

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
# Agentic-coding scripts (single_node/agentic/): InferenceX's library refuses a job whose KV-offload settings
# disagree with each other, and the scripts branch on its answers, so the stub answers as it does. The replay
# client, its dependencies and the trace download are not run.
agentic_kv_offload_enabled() {
    [[ -n "${KV_OFFLOADING:-}" ]] || { echo "KV_OFFLOADING must be set for agentic benchmarks" >&2; exit 1; }
    [[ "$KV_OFFLOADING" != "none" ]]
}
require_agentic_kv_offload_none() {
    if agentic_kv_offload_enabled || [[ -n "${KV_OFFLOAD_BACKEND:-}" ]]; then
        echo "expected KV_OFFLOADING=none without a backend" >&2; exit 1
    fi
}
require_agentic_kv_offload_backend() {
    if ! agentic_kv_offload_enabled; then
        [[ -z "${KV_OFFLOAD_BACKEND:-}" ]] || { echo "KV_OFFLOAD_BACKEND set without offload" >&2; exit 1; }
        return 1
    fi
    [[ "$KV_OFFLOADING" == "dram" ]] || { echo "unsupported KV_OFFLOADING=$KV_OFFLOADING" >&2; exit 1; }
    [[ "${KV_OFFLOAD_BACKEND:-}" == "$1" ]] || { echo "expected KV_OFFLOAD_BACKEND=$1" >&2; exit 1; }
    [[ "${TOTAL_CPU_DRAM_GB:-}" =~ ^[1-9][0-9]*$ ]] || { echo "TOTAL_CPU_DRAM_GB must be positive" >&2; exit 1; }
}
if [[ "${IS_AGENTIC:-0}" == "1" ]]; then
    unset MAX_MODEL_LEN  # agentic replays run at the model's native context, as InferenceX's library says
    if agentic_kv_offload_enabled; then
        [[ "$KV_OFFLOADING" == "dram" && -n "${KV_OFFLOAD_BACKEND:-}" && "${TOTAL_CPU_DRAM_GB:-}" =~ ^[1-9][0-9]*$ ]] \
            || { echo "KV_OFFLOADING=dram needs KV_OFFLOAD_BACKEND and TOTAL_CPU_DRAM_GB" >&2; exit 1; }
    elif [[ -n "${KV_OFFLOAD_BACKEND:-}" ]]; then
        echo "KV_OFFLOAD_BACKEND must be empty when KV_OFFLOADING=none" >&2; exit 1
    fi
fi
agentic_pip_install() { :; }
install_agentic_deps() { :; }
ensure_hf_cli() { :; }
resolve_trace_source() { TRACE_SOURCE_FLAG="--public-dataset stub"; }
build_replay_cmd() { :; }
run_agentic_replay_and_write_outputs() { :; }
stop_background_process_tree() { :; }
wait_for_amd_gpu_clean() { :; }
write_command() { :; }
append_command() { :; }
wait_for_ready() { wait; }

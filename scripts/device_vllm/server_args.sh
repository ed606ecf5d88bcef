# Sourced by start.sh: the scheduler limits a recipe sets, from $SERVER_ARGS ("FLAG VALUE ...", split on
# blanks), checked against the flags a held-out set may change, into the array SERVER_ARGV. The same flags
# as accuracy/register_vllm_gpu.py --server-args, so the registered predictions price the server that runs:
# the token budget, the sequence cap, the memory share, --max-cudagraph-capture-size (the largest step a
# CUDA graph replays; vLLM's default is min(2 x --max-num-seqs, 512)) and --stream-interval (tokens a
# running request's streamed chunk waits for).
#   SERVER_ARGS="--max-num-batched-tokens 2048 --max-num-seqs 48 --gpu-memory-utilization 0.83"
# A flag outside the list, or a value of the wrong kind, stops with one line and status 2 (SERVER_ARGV empty).
server_args() {
  local words flag value expected pattern i argv=()
  read -r -a words <<< "${SERVER_ARGS:-}"
  SERVER_ARGV=()
  for (( i = 0; i < ${#words[@]}; i += 2 )); do
    flag=${words[i]} value=${words[i + 1]:-}
    case $flag in
      --max-num-batched-tokens|--max-num-seqs|--max-cudagraph-capture-size|--stream-interval)
        expected="a positive integer" pattern='^[1-9][0-9]*$' ;;
      --gpu-memory-utilization) expected="a share in (0, 1]" pattern='^(0?\.[0-9]*[1-9][0-9]*|1(\.0*)?)$' ;;
      *) echo "SERVER_ARGS: expected --max-num-batched-tokens, --max-num-seqs, --gpu-memory-utilization, --max-cudagraph-capture-size or --stream-interval, got '$flag'" >&2
         return 2 ;;
    esac
    if ! [[ $value =~ $pattern ]]; then
      echo "SERVER_ARGS: $flag expects $expected, got '$value'" >&2
      return 2
    fi
    argv+=("$flag" "$value")
  done
  SERVER_ARGV=("${argv[@]}")
}

# servelab capture stub of the machine tools upstream's launch scripts read (installed as bin/rocm-smi and
# bin/hf by the sandbox; never run outside it). They answer as an idle node of upstream's does, so a script
# reaches its server command; nothing here reaches a GPU, the network or anything outside the sandbox.
name=$(basename "$0")
case "$name" in
rocm-smi)
    # An idle 8-GPU node: no GPU memory in use (the scripts wait for <= 10 % before launching), and MEC
    # firmware older than 177, so the scripts' RCCL reclaim workaround (HSA_NO_SCRATCH_RECLAIM=1) is on as
    # the capture has always had it (an empty answer read as old firmware before).
    for arg in "$@"; do
        case "$arg" in
        --showmemuse) for i in 0 1 2 3 4 5 6 7; do echo "GPU[$i]		: GPU Memory Allocated (VRAM%): 0"; done ;;
        --showfw) for i in 0 1 2 3 4 5 6 7; do echo "GPU[$i]		: MEC firmware version: 	 	 0"; done ;;
        esac
    done
    ;;
hf | huggingface-cli)
    # `hf download REPO [--local-dir DIR]`: a complete checkpoint (config, tokenizer config, a shard index and
    # its one empty shard), in DIR or in the Hugging Face cache layout, whose snapshot path it prints as hf
    # does. Downloads nothing.
    [ "${1:-}" = download ] || exit 0
    repo=${2:-}
    [ -n "$repo" ] || exit 0
    dir=
    shift 2
    while [ $# -gt 0 ]; do
        case "$1" in
        --local-dir) dir=${2:-}; shift ;;
        --local-dir=*) dir=${1#--local-dir=} ;;
        esac
        shift
    done
    if [ -z "$dir" ]; then
        cache=${HF_HUB_CACHE:-${HF_HOME:+$HF_HOME/hub}}
        cache=${cache:-$HOME/.cache/huggingface/hub}
        revision=0000000000000000000000000000000000000000
        models="$cache/models--$(echo "$repo" | sed 's#/#--#g')"
        mkdir -p "$models/refs" && printf '%s' "$revision" > "$models/refs/main"
        dir="$models/snapshots/$revision"
    fi
    mkdir -p "$dir" || exit 0
    echo '{}' > "$dir/config.json"
    echo '{}' > "$dir/tokenizer_config.json"
    echo '{"weight_map": {"w": "model-00001-of-00001.safetensors"}}' > "$dir/model.safetensors.index.json"
    : > "$dir/model-00001-of-00001.safetensors"
    echo "$dir"
    ;;
esac
exit 0

"""After call 5 (CPU): the driver's rows as two campaign folders `servelab db merge` reads: vLLM's CUTLASS
block-FP8 rows (backend vllm-cutlass) and torch's rows at the same keys."""

import datetime
import json
import sys
from pathlib import Path

got, dest, device = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
facts = json.loads((got / "facts.json").read_text())
end = json.loads((got / "end.json").read_text())
manifest = json.loads((device / "call5" / "manifest.json").read_text())
when = datetime.datetime.fromtimestamp(facts["started"], datetime.UTC).isoformat(timespec="seconds")
cmd = (
    "BUDGET=290 bash .ek/fp8gemm/campaign5.sh "
    "(campaigns/h100_sxm_vllm_0.25.0/device/campaign5.sh, fp8gemm.py)"
)
common = {
    "system": "h100_sxm",
    "servelab": "0.1.0",
    "date": when,
    "command": cmd,
    "executor": "fp8gemm.py (one process, key by key)",
    "env": {"NCCL_NVLS_ENABLE": "0", "NVSHMEM_DISABLE_NVLS": "1", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1"},
    "timing_method": "random inputs; rotating input sets >= 256 MiB per replay; op captured N times in one "
    "CUDA graph (~2 ms replay); CUDA events per replay; 3 warm-up replays; median, p10, p90 over 15-100 "
    "replays, per op call",
    "driver": facts["clocks_start"][0]["driver_version"],
    "clocks": {"start": facts["clocks_start"], "end": end["clocks_end"]},
    **{
        k: facts[k]
        for k in (
            "gpu_name",
            "gpu_count",
            "sm_count",
            "gpu_memory_gib",
            "l2_mb",
            "torch",
            "cuda",
            "cudnn",
            "nccl",
            "triton",
        )
    },
    "python": "3.12",
}
rows = {"vllm-cutlass": got / "rows_vllm-cutlass.jsonl", "torch": got / "rows_torch.jsonl"}
errors = [json.loads(x) for x in (got / "errors.jsonl").read_text().splitlines()]
for backend, path in rows.items():
    out = dest / backend
    (out / "rows").mkdir(parents=True, exist_ok=True)
    lines = path.read_text().splitlines()
    (out / "rows" / "gemm.jsonl").write_text("\n".join(lines) + "\n")
    errs = [e for e in errors if e["backend"] == backend]
    (out / "errors.jsonl").write_text(
        "".join(
            json.dumps({"key": e["key"], "error_class": e["error_class"], "message": e["message"]}) + "\n"
            for e in errs
        )
    )
    prov = dict(common)
    prov["runs"] = [
        {
            "backend": backend,
            "rows": len(lines),
            "errors": len(errs),
            "started": when,
            "seconds": round(end["finished"] - facts["started"], 1),
            "command": cmd,
            "clocks_start": facts["clocks_start"],
            "clocks_end": end["clocks_end"],
        }
    ]
    if backend != "torch":
        prov["vllm"] = manifest["version"]
        prov["engine_libraries_loaded"] = facts["engine_libraries_loaded"]
        prov["check_max_rel_error"] = facts["check_max_rel_error"]
        prov["engine"] = {
            "name": "vllm",
            "version": manifest["version"],
            "wheel": manifest["wheel"],
            "wheel_sha256": manifest["wheel_sha256"],
            "files_sha256": manifest["files"],
            "trimmed": manifest["trimmed"],
            "backend": backend,
            "entries": {
                "cutlass_block_fp8": {
                    "kernel": json.loads(lines[0])["backend"],
                    "stand_ins": json.loads(lines[0])["stand_ins"],
                    "versions": ["0.25", "9999"],
                }
            },
        }
    (out / "provenance.json").write_text(json.dumps(prov, indent=1, sort_keys=True) + "\n")
    print(backend, len(lines), "rows", len(errs), "errors")

"""Call 5 (device side): vLLM 0.25.0's CUTLASS block-FP8 GEMM (catalogue entry `cutlass_block_fp8`) and
torch's fp8_block GEMM (servelab.collect.ops.gemm, the torch tables' own op) at the same keys, key by key, on
one GPU, with the collector's timing method (both benches call servelab.collect.timing.time_op).

Why not `servelab collect` itself: the wheel's _C (76 MB, 51 MiB xz-compressed) and the working tree fill the
64 MiB a device call carries, leaving no room for the pydantic wheels the CLI needs; this driver imports only
the bench modules, the loader and the timing code (none needs pydantic). The rows it writes are the
collector's rows (same fields); fp8gemm_assemble.py makes the two campaign folders on the CPU.

Resumable and crash-proof: each finished key is appended at once; the key in flight is noted first, so if a
CUDA error kills the process the shell loop restarts it and that key is recorded as cuda_fatal.
"""

import argparse
import json
import sys
import time
import traceback
import types
from pathlib import Path

import torch

import servelab.collect
from servelab.collect import provenance

# servelab.collect.engines/__init__.py imports servelab.engines (pydantic): register the package without
# running it, so its pydantic-free modules import on their own
_pkg = types.ModuleType("servelab.collect.engines")
_pkg.__path__ = [str(Path(servelab.collect.__file__).parent / "engines")]
sys.modules.setdefault("servelab.collect.engines", _pkg)

from servelab.collect.engines import loader  # noqa: E402
from servelab.collect.engines import vllm_cutlass_gemm as cutlass  # noqa: E402
from servelab.collect.ops import gemm as torch_gemm  # noqa: E402
from servelab.collect.ops import runtime  # noqa: E402
from servelab.collect.worker import _plain  # noqa: E402
from servelab.perfdb.keys import Gemm  # noqa: E402
from servelab.perfdb.ops import OpName  # noqa: E402

ENTRY = "cutlass_block_fp8"
STAND_INS = (
    "the activations' per-token-group FP8 quantisation (vLLM's QuantFP8) is not timed, as in torch's "
    "fp8_block rows"
)


def key_id(backend: str, key: Gemm) -> str:
    return f"{backend}:{key.m}:{key.n}:{key.k}:{key.dtype}"


def read_jsonl(path: Path) -> list[dict]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            pass  # a line cut by a kill
    return out


def append(path: Path, row: dict) -> None:
    with open(path, "a") as f:
        f.write(json.dumps(row) + "\n")


def _check():
    """The kernel against the fp32 reference on one shape (a refusal is recorded, not fatal)."""
    try:
        return cutlass.check()
    except Exception as e:  # noqa: BLE001 - the rows then say why they failed too
        runtime.after_error()
        return f"{type(e).__name__}: {e}"[:500]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--keys", required=True)
    ap.add_argument("--files", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--deadline", type=float, required=True, help="unix time after which no key starts")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = {b: out / f"rows_{b}.jsonl" for b in ("vllm-cutlass", "torch")}
    errors = out / "errors.jsonl"
    inflight = out / "inflight.json"
    done = {
        key_id(b, Gemm(**{f: r[f] for f in ("m", "n", "k", "dtype")}))
        for b in rows
        for r in read_jsonl(rows[b])
    }
    done |= {e["id"] for e in read_jsonl(errors)}
    if inflight.exists():  # the last process died inside this key
        hung = json.loads(inflight.read_text())
        if hung["id"] not in done:
            append(errors, {**hung, "error_class": "cuda_fatal", "message": "the process died in this key"})
            done.add(hung["id"])
        inflight.unlink()

    runtime.init_worker(0)
    found = loader.read_manifest(Path(args.files))
    backends: tuple[str, ...] = ("vllm-cutlass", "torch")
    try:
        sha = loader.load_library(found, cutlass.LIB)  # checks the sha256 against the manifest first
    except Exception as e:  # noqa: BLE001 - torch's rows are still worth the call
        sha = f"not loaded: {type(e).__name__}: {e}"[:500]
        backends = ("torch",)
        print(sha, flush=True)
    facts_path = out / "facts.json"
    if not facts_path.exists():
        major, minor = torch.cuda.get_device_capability()
        facts = runtime.facts() | {
            "engine_libraries_loaded": {cutlass.LIB: sha},
            "cutlass_block_fp8_supported": cutlass.supported(major * 10 + minor)
            if len(backends) > 1
            else None,
            "clocks_start": provenance.nvidia_smi(),
            "started": time.time(),
        }
        facts_path.write_text(json.dumps(facts, indent=1))
        print("facts:", json.dumps(facts), flush=True)
    facts = json.loads(facts_path.read_text())
    if (
        "check_max_rel_error" not in facts and len(backends) > 1
    ):  # the marker tells a restarted process that the check killed it
        marker = out / "checking"
        died = marker.exists()
        marker.write_text("")
        facts["check_max_rel_error"] = "the check killed the process" if died else _check()
        facts_path.write_text(json.dumps(facts, indent=1))
        marker.unlink()
        print("check:", facts["check_max_rel_error"], flush=True)

    # a token count that killed the process for one (n, k) is not tried for the others (each try costs a
    # restart)
    fatal_m = {(e["backend"], e["key"]["m"]) for e in read_jsonl(errors) if e["error_class"] == "cuda_fatal"}
    keys = [Gemm(**{**k, "op": OpName.gemm}) for k in json.loads(Path(args.keys).read_text())]
    n_new = 0
    for key in keys:
        for backend in backends:
            kid = key_id(backend, key)
            if kid in done:
                continue
            if (backend, key.m) in fatal_m:
                msg = f"not run: m={key.m} killed the process at another (n, k)"
                append(
                    errors,
                    {
                        "id": kid,
                        "backend": backend,
                        "key": key._asdict(),
                        "error_class": "cuda_fatal",
                        "message": msg,
                    },
                )
                done.add(kid)
                continue
            if time.time() > args.deadline:
                print(f"deadline: {n_new} keys this run", flush=True)
                end = {"clocks_end": provenance.nvidia_smi(), "finished": time.time()}
                (out / "end.json").write_text(json.dumps(end))
                return 0
            inflight.write_text(json.dumps({"id": kid, "backend": backend, "key": key._asdict()}))
            try:
                if backend == "torch":
                    result = torch_gemm.bench(key)
                else:
                    result = cutlass.bench(key, found) | {
                        "kernel_entry": ENTRY,
                        "engine_version": found.version,
                        "stand_ins": STAND_INS,
                    }
                row = key._asdict() | {"source": "measured"} | _plain(result)
                append(rows[backend], row)
                n_new += 1
                print(
                    f"{backend:13s} m={key.m:6d} n={key.n:6d} k={key.k:6d} {row['latency_us']:10.2f} us",
                    flush=True,
                )
            except Exception as e:  # noqa: BLE001 - every failure is the key's answer
                cls = runtime.classify(e)
                msg = f"{type(e).__name__}: {e}"[:1500]
                if cls == "error":
                    msg += (
                        " | " + " < ".join(x.strip() for x in traceback.format_exc().splitlines()[-4:])[:500]
                    )
                append(
                    errors,
                    {"id": kid, "backend": backend, "key": key._asdict(), "error_class": cls, "message": msg},
                )
                print(f"{backend} {kid}: {cls}: {msg[:200]}", flush=True)
                if cls == "cuda_fatal":
                    inflight.unlink()
                    return 3  # the context is broken: the shell loop starts a fresh process
                runtime.after_error()
            inflight.unlink()
            done.add(kid)
    print(f"all keys done: {n_new} this run", flush=True)
    (out / "end.json").write_text(
        json.dumps({"clocks_end": provenance.nvidia_smi(), "finished": time.time()})
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

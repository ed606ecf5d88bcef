"""What InferenceX's agentic recipe script for an AMD multinode disaggregated job hands on to the nodes'
server script (benchmarks/multi_node/agentic/<prefix>_<precision>_mi355x_<framework>.sh).

An agentic job runs that script instead of the fixed-seq-len one: it exports the HiCache (KV offload to CPU
DRAM) and Mooncake settings, the replay's duration, the model length, the router policy and the MoRI send
queue tuning, and calls submit.sh. job.slurm gives the container some of those through its docker run's `-e`
list (`PASSED`, with job.slurm's default where the script exported nothing) and writes the HiCache/Mooncake
ones to a file mounted at /config/hicache_mc.env (`HICACHE_FILE`), which env.sh sources with auto-export.

`submitted` runs the recipe script under bash, as the multinode workflow and runners/launch_mi355x-amds.sh
call it (`workflow_env`), with upstream's benchmark_lib.sh and a stub submit.sh that records the environment
it is called with and submits nothing (sbatch, srun, docker and the network tools are inert stubs).
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

from servelab.recipes.capture.sandbox import executable
from servelab.recipes.matrix import arm_settings

AGENTIC = "agentic-coding"
RECIPES = "multi_node/agentic"
AMD_UTILS = "multi_node/amd_utils"
TIMEOUT_S = 60.0
# job.slurm's DOCKER_ENV_COMMON entries an agentic recipe script sets, with job.slurm's default for each
PASSED = {
    "DURATION": "1800",
    "MAX_MODEL_LEN": "",
    "KV_OFFLOADING": "none",
    "KV_OFFLOAD_BACKEND": "",
    "TOTAL_CPU_DRAM_GB": "",
    "ENABLE_METRICS": "0",
    "PREFILL_ROUTER_POLICY": "random",
    "DECODE_ROUTER_POLICY": "random",
    "MORI_IO_SQ_BACKOFF_TIMEOUT_US": "",
    "MORI_IO_QP_MAX_SEND_WR": "",
    "DISABLE_CUSTOM_ALL_REDUCE": "",
    "DISAGG": "false",
    "SCENARIO_TYPE": "",
    "DECODE_MTP_SIZE": "",
}
# the names job.slurm writes to the HiCache/Mooncake config file, in its order (empty where unset)
HICACHE_FILE = (
    "HICACHE_RATIO",
    "FORCE_HICACHE_RATIO",
    "HICACHE_HOST_POOL_COUNT",
    "HICACHE_PAGE_SIZE",
    "HICACHE_IO_BACKEND",
    "HICACHE_MEM_LAYOUT",
    "HICACHE_WRITE_POLICY",
    "HICACHE_STORAGE_BACKEND",
    "HICACHE_PREFETCH_POLICY",
    "MC_PATCH_HOSTPOOL",
    "MC_MASTER_PORT",
    "MC_METADATA_PORT",
    "MC_METRICS_PORT",
    "MC_MASTER_THREADS",
    "MC_EVICTION_HIGH_WATERMARK",
    "MC_PROTOCOL",
    "MC_GLOBAL_SEG",
    "MC_DEVICE",
    "MC_MASTER_ADDR",
    "MC_METADATA_SERVER",
)
CONFIG_PATH = "/config/hicache_mc.env"
_SUBMIT = '#!/bin/sh\nenv -0 > "$SERVELAB_SUBMITTED"\necho 4242\n'
_INERT = ("apt-get", "apt", "pip", "pip3", "git", "curl", "sleep", "sudo", "docker", "sbatch", "srun")


def is_agentic(row: dict) -> bool:
    return row.get("scenario-type") == AGENTIC


def recipe_script(row: dict) -> str:
    """The agentic recipe of the row, relative to benchmarks/: runners/launch_mi355x-amds.sh's name for it."""
    prefix = str(row["exp-name"]).split("_", 1)[0]
    return f"{RECIPES}/{prefix}_{row['precision']}_mi355x_{row['framework']}.sh"


def _pool(row: dict, role: str) -> dict[str, str]:
    pool, up = row[role], role.upper()
    return {
        f"{up}_NUM_WORKERS": str(pool["num-worker"]),
        f"{up}_TP": str(pool["tp"]),
        f"{up}_PP_SIZE": str(pool.get("pp", 1)),
        f"{up}_DCP_SIZE": str(pool.get("dcp-size", 1)),
        f"{up}_PCP_SIZE": str(pool.get("pcp-size", 1)),
        f"{up}_EP": str(pool["ep"]),
        f"{up}_DP_ATTN": "true" if pool["dp-attn"] else "false",
    }


def workflow_env(row: dict) -> dict[str, str]:
    """What the recipe script is called with: the multinode workflow's env for an agentic row
    (run-sweep.yml's sweep-multi-node-agentic: isl, osl and max-model-len '0'), the pools' additional settings
    it exports, and runners/launch_mi355x-amds.sh's exports."""
    concs = row["conc"] if isinstance(row["conc"], list) else [row["conc"]]
    backend = row.get("kv-offload-backend")
    return {
        "RANDOM_RANGE_RATIO": "0.8",
        "EXP_NAME": str(row["exp-name"]),
        "IMAGE": str(row["image"]),
        "MODEL_PREFIX": str(row["model-prefix"]),
        "MODEL": str(row["model"]),
        "FRAMEWORK": str(row["framework"]),
        "PRECISION": str(row["precision"]),
        "ISL": "0",
        "OSL": "0",
        "MAX_MODEL_LEN": "0",
        "CONC_LIST": " ".join(map(str, concs)),
        "CONC": str(concs[0]),
        "SPEC_DECODING": str(row.get("spec-decoding", "none")),
        "DISAGG": "true" if row.get("disagg") else "false",
        "RUN_EVAL": "false",
        "EVAL_ONLY": "false",
        "SCENARIO_TYPE": AGENTIC,
        "SCENARIO_SUBDIR": "agentic/",
        "IS_AGENTIC": "1",
        "DURATION": str(row["duration"]),
        "KV_OFFLOADING": str(row["kv-offloading"]),
        "KV_OFFLOAD_BACKEND": str(backend["name"]) if isinstance(backend, dict) else str(backend or ""),
        "TOTAL_CPU_DRAM_GB": str(row.get("total-cpu-dram-gb") or ""),
        "KV_P2P_TRANSFER": str(row.get("kv-p2p-transfer") or ""),
        **_pool(row, "prefill"),
        **_pool(row, "decode"),
        **arm_settings(row),
        # runners/launch_mi355x-amds.sh
        "IS_MULTINODE": "true",
        "SLURM_ACCOUNT": "servelab",
        "SLURM_PARTITION": "compute",
        "MODEL_NAME": str(row["model"]).rsplit("/", 1)[-1],
        "MODEL_PATH": "/it-share/data",
        "MODEL_DIR": "/it-share/data",
        "GPUS_PER_NODE": "8",
        "RUNNER_NAME": "mi355x-amds_0",
    }


def submitted(benchmarks: Path, row: dict) -> dict[str, str]:
    """The environment the row's agentic recipe script calls submit.sh with (what job.slurm then reads)."""
    with tempfile.TemporaryDirectory(prefix="servelab-amd-agentic-") as tmp_name:
        tmp = Path(tmp_name)
        ws = tmp / "workspace"
        script = recipe_script(row)
        (ws / "benchmarks" / RECIPES).mkdir(parents=True)
        (ws / "benchmarks" / AMD_UTILS).mkdir(parents=True)
        shutil.copy(benchmarks / "benchmark_lib.sh", ws / "benchmarks" / "benchmark_lib.sh")
        shutil.copy(benchmarks / script, ws / "benchmarks" / script)
        (ws / "benchmarks" / AMD_UTILS / "submit.sh").write_text(_SUBMIT)
        bin_dir = tmp / "bin"
        bin_dir.mkdir()
        for name in _INERT:
            executable(bin_dir / name, "#!/bin/sh\nexit 0\n")
        out = tmp / "submitted"
        env = {
            **workflow_env(row),
            "GITHUB_WORKSPACE": str(ws),
            "PATH": f"{bin_dir}:/usr/bin:/bin",
            "HOME": str(tmp),
            "PYTHONPYCACHEPREFIX": str(tmp / "pycache"),
            "SERVELAB_SUBMITTED": str(out),
        }
        done = subprocess.run(
            ["bash", str(ws / "benchmarks" / script)],
            cwd=ws,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            check=False,
        )
        if done.returncode != 0 or not out.is_file():
            last = (done.stdout + done.stderr).strip().splitlines()[-1:] or ["no output"]
            raise RuntimeError(f"{script}: submitted nothing (exit {done.returncode}): {last[0]}")
        items = (item.partition("=") for item in out.read_text().split("\0"))
        return {k: v.replace(str(ws), "/workspace") for k, sep, v in items if sep}


def node_overrides(submitted_env: dict[str, str]) -> dict[str, str]:
    """What job.slurm's docker run gives the container from the recipe's environment (`PASSED`)."""
    return {k: submitted_env.get(k) or default for k, default in PASSED.items()} | {
        "IS_AGENTIC": submitted_env.get("IS_AGENTIC", "0"),
        "BENCH_INPUT_LEN": submitted_env.get("ISL", ""),
        "BENCH_OUTPUT_LEN": submitted_env.get("OSL", ""),
    }


def config_file(submitted_env: dict[str, str]) -> str:
    """The HiCache/Mooncake file job.slurm writes (and mounts at CONFIG_PATH): NAME=value lines."""
    return "".join(f"{k}={submitted_env.get(k, '')}\n" for k in HICACHE_FILE)

"""servelab's srun stub for the TileRT capture (capture/tilert.py): an image import (`srun ... bash -c ...`
with no --container-image) does nothing; a node's command runs here, with the variables its --export names,
on that node (SERVELAB_NODE, its --nodelist) and in the job (SLURM_JOB_ID, as srun sets it)."""

import os
import sys

args, env, i = sys.argv[1:], dict(os.environ), 0
while i < len(args) and args[i].startswith("--"):
    name, _, value = args[i].partition("=")
    if name == "--export":
        for kv in value.split(",")[1:]:  # ALL,K=V,...
            k, _, v = kv.partition("=")
            env[k] = v
    elif name == "--nodelist":
        env["SERVELAB_NODE"] = value
    i += 1
if not any(a.startswith("--container-image") for a in args[:i]):
    sys.exit(0)
env["SLURM_JOB_ID"] = env["SERVELAB_SLURM_JOB_ID"]
os.execvpe(args[i], args[i:], env)

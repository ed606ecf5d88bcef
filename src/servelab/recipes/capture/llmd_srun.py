"""servelab's srun stub for the llm-d capture (capture/llmd.py), in job.slurm's allocation of NUM_NODES nodes
(node0 .. nodeN-1, SERVELAB_NODE_IPS their addresses):

- `srun --nodelist=nodeK bash -c 'ip route get ...'` prints node K's address (job.slurm reads each node's);
- a command without --container-image (job.slurm's `test -d` of the model on every node) does nothing;
- the containers' srun (pyxis: --container-image) runs its command once per node, rank 0 first, with srun's
  SLURM_PROCID and the node's address (SERVELAB_NODE, SERVELAB_NODE_IP). Its `bash -lc` runs as `bash -c`:
  a login shell reads the image's profile, which is not this machine's (here it would reset PATH)."""

import os
import subprocess
import sys

args, i, opts = sys.argv[1:], 0, {}
while i < len(args) and args[i].startswith("-"):
    name, _, value = args[i].partition("=")
    opts[name] = value
    i += 1
command = args[i:]
ips = os.environ["SERVELAB_NODE_IPS"].split(",")
if "--container-image" not in opts:
    if any("ip route get" in a for a in command):
        print(ips[int(opts["--nodelist"].removeprefix("node"))])
    sys.exit(0)
if command[:2] == ["bash", "-lc"]:
    command = ["bash", "-c", *command[2:]]
code = 0
for rank in range(int(os.environ["NUM_NODES"])):
    env = {**os.environ, "SLURM_PROCID": str(rank), "SERVELAB_NODE": str(rank), "SERVELAB_NODE_IP": ips[rank]}
    code = subprocess.run(command, env=env, check=False).returncode or code
sys.exit(code)

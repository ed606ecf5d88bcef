"""A stub of the commands that start servers, run in the capture sandbox as bin/<command> (never imported).

    python -I stub_server.py CONFIG COMMAND_PATH ARGS...

CONFIG is the sandbox's JSON file: `servers` (commands that start servers), `modules` (the `python -m`
modules that do), `capture` (the file each launch is appended to, one JSON line: argv, environment and the
content of the files its arguments name) and `packages` (the stand-ins of the image's Python packages). A
python program read from stdin (`python3 - <<EOF`) runs, and so does a `-c` program asking where a package is
installed (against the stand-ins only); anything else (`python3 -c ...`, a helper script) exits 0 and does
nothing. Standard library only: the sandbox runs it
with a clean environment.
"""

import json
import os
import sys

# python's options that take no value (python3 --help), as the launch scripts may put them before -m
PYTHON_SWITCHES = ("-u", "-B", "-E", "-I", "-O", "-OO", "-P", "-q", "-s", "-S", "-v")


def main(argv: list[str]) -> int:
    with open(argv[1]) as f:
        config = json.load(f)
    name, args = os.path.basename(argv[2]), argv[3:]
    if name == "mpirun":  # mpirun -n 1 --flags... SERVER ARGS: record the server part
        while args and os.path.basename(args[0]) not in config["servers"]:
            args = args[1:]
        name, args = (args[0], args[1:]) if args else (name, [])
    if name.startswith("python") and args[:1] == ["-"]:
        # a program on stdin (`python3 - DIR <<'PY'`): the scripts' checks of the checkpoint the hf stub laid
        # out, standard library only; run by this interpreter, isolated, as the script's own code
        os.execv(sys.executable, [sys.executable, "-I", *args])
    if name.startswith("python") and args[:1] == ["-c"] and "find_spec(" in (args[1:2] or [""])[0]:
        # where the image has a package installed (`python -c '...find_spec("vllm")...'`): answered from the
        # sandbox's stand-ins of the image's packages (the only path added), isolated from this machine's (no
        # site-packages, no user site)
        env = {**os.environ, "PYTHONPATH": config["packages"]}
        os.execve(sys.executable, [sys.executable, "-S", "-s", *args], env)
    if name.startswith("python"):
        # python's own switches before -m (`python3 -u -m atom.entrypoints.openai_server`) are the
        # interpreter's: the server is the module
        at = 0
        while at < len(args) and args[at] in PYTHON_SWITCHES:
            at += 1
        if not (len(args) > at + 1 and args[at] == "-m" and args[at + 1] in config["modules"]):
            return 0
    files = {}
    for token in args:
        value = token.split("=", 1)[1] if token.startswith("--") and "=" in token else token
        if os.path.isfile(value) and not value.endswith((".log", ".csv")):
            with open(value) as f:
                files[value] = f.read()
    with open(config["capture"], "a") as out:
        out.write(json.dumps({"argv": [name, *args], "env": dict(os.environ), "files": files}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

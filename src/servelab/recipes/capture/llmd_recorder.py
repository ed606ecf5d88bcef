"""servelab's server stub for the llm-d capture (capture/llmd.py), run as vllm, pd-sidecar, epp and envoy:
it records its argv and environment (one JSON line in SERVELAB_RECORD, with the node it runs on) and starts
nothing. epp then listens on its gRPC port (server.sh waits for that port before it starts Envoy) until one
connection came, or a minute passed."""

import json
import os
import socket
import sys

name, args = os.path.basename(sys.argv[1]), sys.argv[2:]
line = {"node": os.environ.get("SERVELAB_NODE"), "argv": [name, *args], "env": dict(os.environ)}
with open(os.environ["SERVELAB_RECORD"], "a") as f:
    f.write(json.dumps(line) + "\n")
if name == "epp":
    port = next(int(a.split("=", 1)[1]) for a in args if a.startswith("--grpc-port="))
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))
        s.listen()
        s.settimeout(60)
        try:
            s.accept()[0].close()
        except TimeoutError:
            pass

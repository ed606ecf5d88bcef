"""A round-robin HTTP proxy standing in for a router in `servelab run` deployment tests (the real router,
vllm-router, is in the e2e test):

    python rr_proxy.py PORT WORKER_URL...

Each request goes to the next worker, its response (a stream included) copied back as it arrives; /health
answers 200 once every worker's /health does."""

import sys
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from itertools import cycle
from threading import Lock

PORT, WORKERS = int(sys.argv[1]), sys.argv[2:]
_next, _lock = cycle(WORKERS), Lock()


def _up(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/health", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


class Proxy(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        if self.path == "/health":
            self.send_response(200 if all(_up(w) for w in WORKERS) else 503)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self._forward(None)

    def do_POST(self) -> None:
        self._forward(self.rfile.read(int(self.headers.get("Content-Length") or 0)))

    def _forward(self, body: bytes | None) -> None:
        with _lock:
            worker = next(_next)
        headers = {"Content-Type": self.headers.get("Content-Type") or "application/json"}
        req = urllib.request.Request(worker + self.path, data=body, headers=headers)
        try:
            resp = urllib.request.urlopen(req, timeout=60)
        except urllib.error.HTTPError as e:
            resp = e
        with resp:
            self.send_response(resp.status)
            self.send_header("Content-Type", resp.headers.get("Content-Type") or "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            while chunk := resp.read1(65536):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")

    def log_message(self, *args) -> None:
        pass


if __name__ == "__main__":
    print(f"proxy on {PORT} for {' '.join(WORKERS)}", flush=True)
    ThreadingHTTPServer(("127.0.0.1", PORT), Proxy).serve_forever()

"""accuracy/sim_vs_vllm_cpu.py's client against a server that closes a connection as a request is written
(vLLM's API server closing a keep-alive connection, the race the CI machine once lost): the request is sent
again on a new connection and timed from that send; a server that never answers still fails the run."""

import json

from accuracy_python import run_accuracy_python

ASK = """
import asyncio, json, sys
import sim_vs_vllm_cpu as sim

closes = int(sys.argv[1])  # connections closed unanswered before one is answered
seen = []

async def handle(reader, writer):
    await reader.readuntil(b"\\r\\n\\r\\n")  # the request's headers
    seen.append(len(seen))
    if len(seen) <= closes:
        writer.close()
        return
    writer.write(b"HTTP/1.1 200 OK\\r\\ncontent-type: text/event-stream\\r\\nconnection: close\\r\\n\\r\\n")
    for i in range(3):
        writer.write(b'data: {"choices": [{"text": "t%d"}]}\\n\\n' % i)
    writer.write(b"data: [DONE]\\n\\n")
    await writer.drain()
    writer.close()

async def main():
    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1/completions"
    async with server, sim._session() as session:
        try:
            times = await sim._stream(session, url, [5, 6, 7], 3, "m")
            return {"events": len(times), "connections": len(seen), "tries": sim.SEND_TRIES}
        except Exception as e:
            return {"error": type(e).__name__, "connections": len(seen), "tries": sim.SEND_TRIES}

print(json.dumps(asyncio.run(main())))
"""


def ask(closes: int) -> dict:
    return json.loads(run_accuracy_python(["-c", ASK, str(closes)]).strip().splitlines()[-1])


def test_a_request_whose_connection_closed_unanswered_is_sent_again():
    out = ask(1)
    assert out == {"events": 3, "connections": 2, "tries": out["tries"]} and out["tries"] >= 2


def test_a_server_that_never_answers_still_fails_after_the_tries():
    out = ask(99)
    assert out["error"] in {"ServerDisconnectedError", "ClientOSError", "ClientConnectionResetError"}
    assert out["connections"] == out["tries"]

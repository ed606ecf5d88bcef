"""The model name a benchmark asks a server or a deployment for: the name it serves, as its argv says."""

from servelab.recipes.engines.base import Role
from servelab.run.plan import deployment_served_name, served_name
from servelab.runner.deployment import DeployedProcess


def test_a_grammar_reads_vllms_served_name():
    argv = ["vllm", "serve", "org/model", "--served-model-name", "short", "other"]
    assert served_name(argv, "org/model") == "short"


def test_a_server_without_a_grammar_is_read_for_the_flag():
    # Dynamo's workers (python3 -m dynamo.trtllm) are no engine servelab's grammars read
    argv = ["python3", "-m", "dynamo.trtllm", "--model-path", "/model", "--served-model-name", "R1-NVFP4"]
    assert served_name(argv, "deepseek-r1-fp4") == "R1-NVFP4"
    assert served_name(["python3", "-m", "dynamo.trtllm", "--served_model_name=R1"], "x") == "R1"


def test_a_server_that_names_nothing_keeps_the_model():
    assert served_name(["python3", "-m", "some.server", "--port", "1"], "org/model") == "org/model"


def _proc(role: Role, index: int, argv: list[str]) -> DeployedProcess:
    return DeployedProcess(role=role, index=index, argv=argv, port=8000)


def test_a_deployment_answers_to_the_first_name_a_server_is_given():
    # TileRT: its decode server names no model, the prefill vLLM serves `glm5`, the router passes it on
    procs = (
        _proc(Role.PREFILL, 0, ["vllm", "serve", "/models/glm", "--served-model-name", "glm5"]),
        _proc(Role.DECODE, 0, ["python", "-m", "tilert.pd_vllm.decode_server", "--engine", "tilert"]),
        _proc(Role.ROUTER, 0, ["python", "-m", "router", "--served-model-name", "not-a-server"]),
    )
    assert deployment_served_name(procs, "zai-org/GLM-5.1-FP8") == "glm5"
    # a router's flag is not a server's name: with no server naming one, the first server's checkpoint
    unnamed = (procs[1], procs[2])
    assert deployment_served_name(unnamed, "zai-org/GLM-5.1-FP8") == "zai-org/GLM-5.1-FP8"

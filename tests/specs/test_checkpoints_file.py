"""specs/data/checkpoints.json is read through its model; a malformed file is one line naming the field."""

import json

import pytest

from servelab.errors import ServelabError
from servelab.specs import Dtype, list_checkpoints, load_model
from servelab.specs.registry import CHECKPOINTS_FILE, read_checkpoints


def test_checkpoints_name_their_model_and_precision():
    fp8 = list_checkpoints()["sgl-project/DeepSeek-V4-Pro-FP8"]
    assert fp8.model == "deepseek-v4-pro" and fp8.experts == Dtype("fp8_block") and fp8.overrides_precision
    assert load_model("sgl-project/DeepSeek-V4-Pro-FP8").precision.experts == fp8.experts


def test_a_malformed_file_is_one_line(tmp_path):
    data = json.loads(CHECKPOINTS_FILE.read_text())
    data["deepseek-ai/DeepSeek-V3"]["experts"] = "fp7"
    path = tmp_path / "checkpoints.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ServelabError) as e:
        read_checkpoints(path)
    assert str(e.value).startswith(f"{path}: deepseek-ai/DeepSeek-V3.experts: Input should be")
    assert "\n" not in str(e.value)

"""The engine-kernel collector on the CPU (CI has no GPU): every engine's catalogue, its entries' keys and
dry-run plan; the loader of an engine's wheel files, found or refused in one line; a fake engine kernel timed
by the collector's own timing loop on the host clock, through the real campaign, provenance and merge; and
the shipped vLLM kernel tables rebuilt row for row from their campaigns by the merge."""

import json
import zipfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from servelab.cli.main import app
from servelab.collect.campaign import CampaignConfig, run
from servelab.collect.campaign_dir import CampaignDir, key_from_row
from servelab.collect.engines import CATALOGUES, catalogue, in_range, loader, plans, version_tuple
from servelab.collect.engines import campaign as ec
from servelab.collect.engines.campaign import EngineRun
from servelab.collect.executors import LocalExecutor
from servelab.collect.suite import OpSuite
from servelab.engines import MODELLED, Engine
from servelab.errors import ServelabError
from servelab.perfdb.keys import KEY_TYPES, Dsv4Context, Dsv4Generation, Gemm, Memory, Moe, key_from_dict
from servelab.perfdb.merge import _rows_of, merge
from servelab.perfdb.table_files import read_table
from servelab.perfdb.tables import data_root
from servelab.predict.graph import StepShape, step_ops
from servelab.specs import Parallel, load_model

REPO = Path(__file__).resolve().parents[2]
FAKE = "fake_engine:CATALOGUE"  # tests/collect/fake_engine.py, by import path as workers find it
FAKE_DEVICE = "fake_engine:"


# ---- the catalogues ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("engine", MODELLED)
def test_every_engine_has_a_catalogue_whose_entries_plan_keys_they_run(engine):
    cat = catalogue(engine.value)
    assert cat.engine == engine and cat.entries
    for e in cat.entries:
        keys = e.plan()
        assert keys, e.name
        for k in keys:
            assert k.op in e.ops and e.runs(k), (e.name, k)
            # a planned key is a perfdb key: it round-trips through the predictor's own key parser
            assert key_from_dict(k.op, {f: v for f, v in k._asdict().items() if f != "op"}) == k
            assert type(k) is KEY_TYPES.get(k.op)
        assert set(e.libraries) <= set(e.files), e.name
        assert version_tuple(e.versions[0]) < version_tuple(e.versions[1])
        # a worker finds its entry by (backend, key): entries of one backend and op split the keys
        for other in cat.entries:
            if other is not e and other.backend == e.backend and set(other.ops) & set(e.ops):
                assert not any(other.runs(k) for k in keys), (e.name, other.name)


def test_engine_names_take_every_spelling_and_refuse_others_in_one_line():
    assert catalogue("trt").engine == Engine.TRTLLM
    assert catalogue("SGL").engine == Engine.SGLANG
    with pytest.raises(ServelabError) as err:
        catalogue("tgi")
    assert "\n" not in str(err.value) and "vllm" in str(err.value)
    assert set(CATALOGUES) == {e.value for e in MODELLED}
    with pytest.raises(ServelabError, match="atom"):  # launched by recipes, not priced: no kernels to time
        catalogue("atom")


def test_versions_select_entries():
    assert version_tuple("0.25.0+cu130") == (0, 25, 0) and version_tuple("0.24.0rc1") == (0, 24, 0)
    assert in_range("0.25.0", ("0.24", "9999")) and not in_range("0.18.0", ("0.24", "9999"))
    vllm = catalogue("vllm")
    assert "marlin_moe" not in {e.name for e in vllm.applicable("0.18.0")}  # _moe_C of 0.18 is torch 2.10's
    assert {"marlin_moe", "fused_moe", "dsv4_flashmla"} <= {e.name for e in vllm.applicable("0.25.0")}
    assert vllm.for_key(Moe(8, 2880, 360, 128, 4, 1, "mxfp4"), "0.25.0").name == "marlin_moe"
    # bf16 experts: the same Triton kernel, unquantised (its own entry, keyed by dtype)
    assert vllm.for_key(Moe(8, 2880, 360, 128, 4, 1, "bf16"), "0.25.0").name == "fused_moe_bf16"
    assert vllm.for_key(Moe(8, 2880, 360, 128, 4, 1, "fp8_block"), "0.25.0").name == "fused_moe"
    assert vllm.for_key(Moe(8, 2880, 360, 128, 4, 1, "fp8"), "0.25.0") is None


def test_the_dsv4_plan_holds_the_keys_the_recipes_ask_for():
    """The keys step_ops asks for DeepSeek-V4-Flash-FP8 at the H200 recipes' TP8 + EP8 (with and without DP
    attention): an 8K prompt and decode at 8K + 1K are planned as they are; a 1M-token prompt's last chunk,
    F(1M) - F(1M - 8K), lies between planned lengths of its op and heads (the table interpolates there)."""
    planned = set(catalogue("vllm").entry("dsv4_flashmla").plan())
    model = load_model("sgl-project/DeepSeek-V4-Flash-FP8")
    for par in (Parallel(tp=8, ep=8), Parallel(tp=8, ep=8, dp_attn=True)):
        shapes = [
            StepShape(prefill=((8192, 0),)),
            StepShape(prefill=((8192, (1 << 20) - 8192),)),
            StepShape(decode_batch=64 * par.attn_dp, decode_kv_len=9216),
        ]
        for shape in shapes:
            asked = [
                o.key for o in step_ops(model, par, shape) if isinstance(o.key, (Dsv4Context, Dsv4Generation))
            ]
            assert asked
            for k in asked:
                if k not in planned:
                    same = [
                        p.seq for p in planned if isinstance(p, Dsv4Context) and p._replace(seq=k.seq) == k
                    ]
                    assert same and min(same) < k.seq < max(same), k
    heads = {(k.native_heads, k.heads) for k in planned}
    assert heads == {(64, 8), (64, 64), (128, 16)}  # Flash at TP8 and DP8, Pro at TP8
    assert max(k.seq for k in planned if isinstance(k, Dsv4Context)) == 1 << 20


def test_long_prompts_are_timed_a_chunk_at_a_time_with_weights_that_add_up():
    for seq in (8192, 16384, 32768, 65536, 1 << 20, 100_000):
        pieces = plans.dsv4_pieces(Dsv4Context(64, 8, 1, seq))
        # every chunk is counted once: the weights add up to the chunks, their tokens to the prompt
        assert sum(w * new for new, _, w in pieces) == pytest.approx(seq)
        assert all(new <= plans.CHUNK for new, _, _ in pieces) and len(pieces) <= 4
    # exact where a chunk's cost is linear in what came before it
    pieces = plans.dsv4_pieces(Dsv4Context(64, 8, 1, 1 << 20))
    assert sum(w * (3.0 + past / 1000) for _, past, w in pieces) == pytest.approx(
        sum(3.0 + i * plans.CHUNK / 1000 for i in range(128))
    )


def test_the_marlin_entry_plans_the_shipped_table_and_deepseek_v4s_fp4_experts():
    shipped = read_table(data_root() / "h200_sxm" / "vllm-marlin" / "0.24.0" / "moe.parquet")
    shipped_keys = {key_from_row(r) for r in _rows_of(shipped, 0)}
    planned = catalogue("vllm").entry("marlin_moe").plan()
    assert shipped_keys <= set(planned)
    dsv4 = [k for k in planned if k not in shipped_keys]
    assert dsv4 and {(k.dtype, k.experts, k.topk, k.ep) for k in dsv4} == {("fp4", 256, 6, 8)}


def test_the_int4_marlin_entry_plans_kimis_int4_experts_as_the_step_asks_for_them():
    """Kimi-K2.5's routed experts are INT4 (W4A16): the entry plans the keys a TP8 decode step of Kimi asks
    for (InferenceX's INT4 recipes run TP8), and only INT4 experts route to it."""
    vllm = catalogue("vllm")
    planned = vllm.entry("marlin_moe_int4").plan()
    assert {(k.hidden, k.inter, k.experts, k.topk, k.ep, k.dtype) for k in planned} == {
        (7168, 256, 384, 8, 1, "int4")
    }
    ops = step_ops(load_model("moonshotai/Kimi-K2.5"), Parallel(tp=8), StepShape(decode_batch=16))
    asked = {o.key for o in ops if isinstance(o.key, Moe)}
    assert asked and asked <= set(planned)
    assert {1, 4, 16, 64, 16384} <= {k.tokens for k in planned}
    assert vllm.for_key(planned[0], "0.25.0").name == "marlin_moe_int4"
    assert vllm.for_key(planned[0]._replace(dtype="mxfp4"), "0.25.0").name == "marlin_moe"


def test_the_cutlass_entry_plans_deepseek_v4s_block_fp8_linears_and_the_kernel_choice_prices_them():
    from servelab.engines import kernel_choices  # noqa: PLC0415 - beside the catalogue it mirrors
    from servelab.engines.version import Version  # noqa: PLC0415

    e = catalogue("vllm").entry("cutlass_block_fp8")
    planned = e.plan()
    model = load_model("sgl-project/DeepSeek-V4-Flash-FP8")
    asked = {
        op.key
        for par in plans.RECIPE_PARALLELS
        for op in step_ops(model, par, StepShape(decode_batch=64 * par.attn_dp))
        if getattr(op.key, "dtype", None) == "fp8_block" and op.key.op == "gemm"
    }
    assert asked and asked <= set(planned)  # every block-FP8 linear of a 64-token step, both recipes
    assert sorted({k.m for k in planned}) == list(plans.TOKENS)
    assert catalogue("vllm").for_key(Gemm(64, 4096, 1024, "fp8_block"), "0.25.0") is e
    assert catalogue("vllm").for_key(Gemm(64, 4096, 1024, "bf16"), "0.25.0") is None
    choice = next(c for c in kernel_choices(Engine.VLLM) if c.table == e.backend)
    assert choice.runs(Gemm(64, 4096, 1024, "fp8_block"), Version("0.25.0"), 90)
    assert not choice.runs(Gemm(64, 4096, 1024, "fp8"), Version("0.25.0"), 90)  # row-wise: another kernel
    assert not choice.runs(Gemm(64, 24, 1024, "fp8_block"), Version("0.25.0"), 90)  # N % 16: Triton
    assert not choice.runs(Gemm(64, 4096, 1024, "fp8_block"), Version("0.24.0"), 90)  # not read there
    assert not choice.runs(Gemm(64, 4096, 1024, "fp8_block"), Version("0.25.0"), 80)  # no CUTLASS blocks


def test_the_rms_norm_entry_plans_every_bandwidth_bound_key_of_deepseek_v4s_steps():
    e = catalogue("vllm").entry("rms_norm")
    planned = set(e.plan())
    for name in ("sgl-project/DeepSeek-V4-Flash-FP8", "sgl-project/DeepSeek-V4-Pro-FP8"):
        model = load_model(name)
        for par in plans.RECIPE_PARALLELS:
            for shape in (StepShape(decode_batch=64, decode_kv_len=1024), StepShape(prefill=((8192, 0),))):
                asked = {op.key for op in step_ops(model, par, shape) if isinstance(op.key, Memory)}
                assert asked and asked <= planned  # norms, mHC mixing, MoE route / permute / combine
    assert {k.kernels for k in planned} == {1, 2}  # the MoE top-k is two launches
    assert catalogue("vllm").for_key(Memory(1 << 20), "0.25.0") is e


def test_a_worker_loads_only_the_entries_kernels_names(monkeypatch):
    from servelab.collect.engines import runtime  # noqa: PLC0415 - the worker side

    monkeypatch.setenv(runtime.ENV_ENGINE, "vllm")
    monkeypatch.setenv(runtime.ENV_BACKEND, "vllm")
    monkeypatch.delenv(runtime.ENV_CATALOGUE, raising=False)
    monkeypatch.delenv(runtime.ENV_KERNELS, raising=False)
    every = [e.name for e in runtime.campaign_entries()]
    assert every == ["dsv4_flashmla", "fused_moe", "fused_moe_bf16", "rms_norm"]
    run_env = ec.env(EngineRun("vllm", "vllm", None, ("rms_norm",)))
    monkeypatch.setenv(runtime.ENV_KERNELS, run_env[runtime.ENV_KERNELS])
    # the campaign passes --kernels to its workers, which then need (and load) only _C, not FlashMLA
    assert [e.name for e in runtime.campaign_entries()] == ["rms_norm"]
    assert runtime.entry_for(Memory(1 << 20)).name == "rms_norm"
    with pytest.raises(ServelabError):
        runtime.entry_for(Moe(8, 2048, 768, 128, 8, 1, "bf16"))
    # one backend's two fused-MoE entries: the key's dtype picks the one that runs it
    monkeypatch.setenv(runtime.ENV_KERNELS, "fused_moe,fused_moe_bf16")
    assert runtime.entry_for(Moe(8, 2048, 768, 128, 8, 1, "bf16")).name == "fused_moe_bf16"
    assert runtime.entry_for(Moe(8, 7168, 256, 256, 8, 8, "fp8_block")).name == "fused_moe"


def test_the_fused_moe_entry_plans_deepseek_v4_at_ep8_and_r1_at_small_m():
    planned = catalogue("vllm").entry("fused_moe").plan()
    assert Moe(64, 4096, 2048, 256, 6, 8, "fp8_block") in planned
    r1 = sorted(k.tokens for k in planned if k.hidden == 7168 and k.ep == 1)
    assert r1 == list(plans.SMALL_TOKENS)


@pytest.mark.parametrize("engine", MODELLED)
def test_dry_run_prints_every_backends_plan_and_cost_without_a_gpu(engine, tmp_path):
    res = CliRunner().invoke(
        app, ["collect", "--engine", engine.value, "--dry-run", "--json", "--out", str(tmp_path / "c")]
    )
    assert res.exit_code == 0, res.output
    plan = json.loads(res.output)
    assert plan["engine"] == engine.value and plan["backends"]
    for backend, b in plan["backends"].items():
        assert b["todo"] == len(b["plan"]) > 0 and b["single_gpu_minutes"] > 0
        assert b["out"] == str(tmp_path / "c" / backend)
        assert all(key_from_row(k) for k in b["plan"])
    pending = {n for b in plan["backends"].values() for n, e in b["entries"].items() if e["pending"]}
    if engine != Engine.VLLM:
        assert pending  # declared, not implemented: the plan says so
    assert not (tmp_path / "c").exists()  # a dry run writes nothing


def test_dry_run_of_one_op_family_plans_only_its_backends(tmp_path):
    res = CliRunner().invoke(app, ["collect", "--engine", "vllm", "--ops", "dsv4", "--dry-run", "--json"])
    plan = json.loads(res.output)
    assert list(plan["backends"]) == ["vllm"]
    assert {k["op"] for k in plan["backends"]["vllm"]["plan"]} == {
        "dsv4_csa_context_module",
        "dsv4_hca_context_module",
        "dsv4_csa_generation_module",
        "dsv4_hca_generation_module",
    }
    res = CliRunner().invoke(app, ["collect", "--engine", "vllm", "--ops", "gemm", "--dry-run", "--json"])
    plan = json.loads(res.output)
    assert list(plan["backends"]) == ["vllm-cutlass"]
    keys = plan["backends"]["vllm-cutlass"]["plan"]
    assert {(k["op"], k["dtype"]) for k in keys} == {("gemm", "fp8_block")}
    # DeepSeek-V4-Flash's q-b projection at DP attention (64 heads x 512) and Pro's, decode to prefill M
    assert {"m": 1, "n": 32768, "k": 1024, "dtype": "fp8_block", "op": "gemm"} in keys
    assert {"m": 16384, "n": 65536, "k": 1536, "dtype": "fp8_block", "op": "gemm"} in keys
    res = CliRunner().invoke(app, ["collect", "--engine", "vllm", "--ops", "comm", "--dry-run"])
    assert isinstance(res.exception, ServelabError) and "no kernel entry" in str(res.exception)
    res = CliRunner().invoke(app, ["collect", "--engine", "vllm", "--kernels", "marlin", "--dry-run"])
    assert isinstance(res.exception, ServelabError) and "marlin_moe" in str(res.exception)


# ---- the loader -------------------------------------------------------------------------------------------
def make_wheel(path: Path, files: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
    return path


def fake_wheel(tmp_path) -> Path:
    return make_wheel(
        tmp_path / "vllm-0.25.0-cp38-abi3-manylinux_2_28_x86_64.whl",
        {
            "vllm/_fake_C.abi3.so": b"\x7fELF not really",
            "vllm/model_executor/layers/fake_kernel.py": b"# a kernel\n",
            "vllm/other.py": b"not needed\n",
            "vllm/configs/E=8,N=64,device_name=NVIDIA_H200.json": b"{}",
        },
    )


def test_extract_copies_what_the_entries_need_and_writes_a_manifest(tmp_path):
    wheel = fake_wheel(tmp_path)
    found = loader.extract(
        wheel, ["vllm/_fake_C.abi3.so", "vllm/configs/*NVIDIA_H200*.json"], tmp_path / "ek", "vllm"
    )
    assert found.version == "0.25.0" and found.wheel_sha256 == loader.sha256(wheel)
    assert sorted(found.files) == [
        "vllm/_fake_C.abi3.so",
        "vllm/configs/E=8,N=64,device_name=NVIDIA_H200.json",
    ]
    assert not (tmp_path / "ek" / "vllm" / "other.py").exists()
    again = loader.read_manifest(tmp_path / "ek")
    assert again == found
    assert loader.verify(again, ["vllm/configs/*.json"]) == found
    assert found.provenance()["files_sha256"]["vllm/_fake_C.abi3.so"] == loader.sha256(
        tmp_path / "ek" / "vllm" / "_fake_C.abi3.so"
    )


def test_a_wheel_given_directly_is_extracted_beside_it_once(tmp_path):
    wheel = fake_wheel(tmp_path)
    found = loader.open_files(wheel, ["vllm/_fake_C.abi3.so"], "vllm")
    assert found.root == tmp_path / "vllm-0.25.0-cp38-abi3-manylinux_2_28_x86_64.files"
    stamp = (found.root / loader.MANIFEST).stat().st_mtime_ns
    assert loader.open_files(wheel, ["vllm/_fake_C.abi3.so"], "vllm") == found
    assert (found.root / loader.MANIFEST).stat().st_mtime_ns == stamp
    # a member the first extraction did not take: extracted, and the earlier ones kept
    more = loader.open_files(wheel, ["vllm/model_executor/layers/fake_kernel.py"], "vllm")
    assert set(more.files) == {"vllm/_fake_C.abi3.so", "vllm/model_executor/layers/fake_kernel.py"}


@pytest.mark.parametrize(
    "case",
    [
        "missing member",
        "not a zip",
        "tampered",
        "no manifest",
        "no such path",
        "other engine",
        "not a wheel name",
    ],
)
def test_the_loader_refuses_in_one_line(tmp_path, case):
    wheel = fake_wheel(tmp_path)
    found = loader.extract(wheel, ["vllm/_fake_C.abi3.so"], tmp_path / "ek", "vllm")
    with pytest.raises(ServelabError) as err:
        if case == "missing member":
            loader.extract(wheel, ["vllm/_moe_C_stable_libtorch.abi3.so"], tmp_path / "x", "vllm")
        elif case == "not a zip":
            bad = tmp_path / "vllm-0.25.0-py3-none-any.whl"
            bad.write_text("no zip")
            loader.extract(bad, ["a"], tmp_path / "y", "vllm")
        elif case == "tampered":
            (found.root / "vllm" / "_fake_C.abi3.so").write_bytes(b"changed")
            loader.open_files(found.root, ["vllm/_fake_C.abi3.so"], "vllm")
        elif case == "no manifest":
            loader.open_files(tmp_path, ["vllm/_fake_C.abi3.so"], "vllm")
        elif case == "no such path":
            loader.open_files(tmp_path / "nowhere", ["a"], "vllm")
        elif case == "other engine":
            loader.open_files(found.root, ["vllm/_fake_C.abi3.so"], "sglang")
        else:
            loader.wheel_version(tmp_path / "vllm.whl")
    assert "\n" not in str(err.value) and str(err.value)


def test_a_library_that_cannot_load_is_refused_in_one_line(tmp_path, monkeypatch):
    found = loader.extract(fake_wheel(tmp_path), ["vllm/_fake_C.abi3.so"], tmp_path / "ek", "vllm")
    loaded = []

    def ok(path):
        loaded.append(path)

    assert loader.load_library(found, "vllm/_fake_C.abi3.so", load=ok) == found.files["vllm/_fake_C.abi3.so"]
    assert loaded == [str(found.root / "vllm" / "_fake_C.abi3.so")]

    def broken(path):
        raise OSError(f"{path}: undefined symbol: _ZN3c1017RegisterOperators\nmore detail")

    monkeypatch.setattr(loader, "_find_cudart", lambda: None)
    with pytest.raises(ServelabError) as err:
        loader.load_library(found, "vllm/_fake_C.abi3.so", load=broken)
    assert "\n" not in str(err.value) and "undefined symbol" in str(err.value)
    assert "_fake_C.abi3.so: cannot load" in str(err.value)


# ---- a fake engine kernel through the real timing, campaign and merge -------------------------------------
def fake_files(tmp_path) -> loader.EngineFiles:
    wheel = make_wheel(
        tmp_path / "vllm-0.25.0-cp38-abi3-manylinux_2_28_x86_64.whl",
        {"vllm/_fake_C.abi3.so": b"\x7fELF", "vllm/model_executor/layers/fake_kernel.py": b"# kernel\n"},
    )
    return loader.extract(
        wheel, ["vllm/_fake_C.abi3.so", "vllm/model_executor/layers/fake_kernel.py"], tmp_path / "ek", "vllm"
    )


def fake_run(tmp_path, files, backend="fake-engine") -> CampaignConfig:
    return CampaignConfig(
        out=tmp_path / "c" / backend,
        ops=("gemm",),
        gpus=1,
        engine=EngineRun("vllm", backend, files.root, (), FAKE, FAKE_DEVICE),
    )


def fake_suite(cfg) -> OpSuite:
    from servelab.collect.engines.runtime import suite  # noqa: PLC0415 - the worker side, imported for its paths

    return suite(("gemm",), device=FAKE_DEVICE)


def test_a_fake_engine_kernel_makes_rows_with_full_provenance_that_merge_into_a_table(tmp_path):
    files = fake_files(tmp_path)
    cfg = fake_run(tmp_path, files)
    # no suite given, as the CLI runs it: the campaign times the engine's entries, never servelab's torch ops
    report = run(cfg, executor=LocalExecutor(1), progress=False, echo=lambda s: None)
    assert report["ok"], report
    store = CampaignDir(cfg.out)
    rows = store.rows("gemm")
    assert sorted(r["m"] for r in rows) == [1, 2, 4, 8]
    for r in rows:
        # timed by the collector's own loop (host clock): warm-ups, replays, median / p10 / p90 per call
        assert r["timing"] == "eager" and r["reps"] >= 15 and r["inner"] >= 1
        assert 0 < r["p10_us"] <= r["latency_us"] <= r["p90_us"]
        assert r["kernel_entry"] == "fake_gemm" and r["engine_version"] == "0.25.0"
        assert r["source_file"] == "fake_kernel.py" and r["stand_ins"]
    prov = json.loads((cfg.out / "provenance.json").read_text())
    eng = prov["engine"]
    assert eng["name"] == "vllm" and eng["version"] == "0.25.0" and prov["vllm"] == "0.25.0"
    assert eng["wheel"].startswith("vllm-0.25.0-") and eng["wheel_sha256"] == files.wheel_sha256
    assert eng["files_sha256"] == files.files and eng["backend"] == "fake-engine"
    assert eng["entries"]["fake_gemm"]["kernel"] and prov["gpu_name"].startswith("NVIDIA H200")
    assert prov["runs"][0]["command"]

    # resumable: a second run measures nothing again
    again = run(cfg, executor=LocalExecutor(1), suite=fake_suite(cfg), progress=False, echo=lambda s: None)
    assert again["this_run"]["rows"] == 0 and len(store.rows("gemm")) == 4

    into = tmp_path / "data" / "h200_sxm" / "fake-engine" / "0.25.0"
    merged = merge([cfg.out], into)
    assert merged["tables"]["gemm"]["rows"] == 4
    table = read_table(into / "gemm.parquet")
    meta_prov = table.meta["provenance"][0]
    assert meta_prov["engine"]["wheel_sha256"] == files.wheel_sha256 and meta_prov["source"] == str(cfg.out)
    assert sorted(r["m"] for r in _rows_of(table, 0)) == [1, 2, 4, 8]


def test_a_pending_entry_is_planned_and_its_keys_recorded_as_unsupported(tmp_path):
    files = fake_files(tmp_path)
    cat = catalogue("vllm")
    assert cat.entry("deepgemm_moe").pending
    # the fake catalogue's pending entry plans nothing; a pending entry's bench says why in one error class
    from servelab.collect.engines import runtime  # noqa: PLC0415 - the worker side

    with pytest.raises(runtime.Unsupported):
        runtime.pending(Moe(1, 64, 64, 8, 2, 1))
    assert runtime.classify(runtime.Unsupported("x")) == "unsupported"
    assert ec.backends(cat, {"moe"}, files.version, ()) == ["vllm", "vllm-marlin", "vllm-deepgemm"]


def test_engine_runs_need_the_engine_files(tmp_path):
    res = CliRunner().invoke(
        app, ["collect", "--engine", "vllm", "--out", str(tmp_path / "c"), "--gpus", "1"]
    )
    assert isinstance(res.exception, ServelabError) and "--engine-files" in str(res.exception)
    res = CliRunner().invoke(app, ["collect", "--engine-files", str(tmp_path), "--dry-run"])
    assert isinstance(res.exception, ServelabError) and "--engine" in str(res.exception)


def test_dry_run_with_a_wheel_extracts_the_files_and_lists_their_sizes(tmp_path):
    wheel = make_wheel(
        tmp_path / "vllm-0.25.0-cp38-abi3-manylinux_2_28_x86_64.whl",
        {
            "vllm/_moe_C_stable_libtorch.abi3.so": b"\x7fELF moe",
            "vllm/_flashmla_C.abi3.so": b"\x7fELF flashmla",
            "vllm/_C_stable_libtorch.abi3.so": b"\x7fELF C",
            "vllm/model_executor/layers/fused_moe/fused_moe.py": b"# fused moe\n",
            "vllm/model_executor/layers/fused_moe/utils.py": b"# utils\n",
            "vllm/model_executor/layers/fused_moe/configs/"
            "E=32,N=2048,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128,128].json": b"{}",
            **{
                f"vllm/model_executor/layers/fused_moe/configs/E=128,N=384,device_name={gpu}.json": b"{}"
                for gpu in ("NVIDIA_H200", "NVIDIA_H100_80GB_HBM3", "NVIDIA_B200")
            },
            "vllm/model_executor/layers/fused_moe/deep_gemm_utils.py": b"# dg\n",
        },
    )
    res = CliRunner().invoke(
        app,
        ["collect", "--engine", "vllm", "--engine-files", str(wheel), "--extract-to", str(tmp_path / "ek"),
         "--dry-run", "--json"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    plan = json.loads(res.output)
    assert plan["version"] == "0.25.0"
    assert set(plan["files"]) == {
        "vllm/_C_stable_libtorch.abi3.so",
        "vllm/_moe_C_stable_libtorch.abi3.so",
        "vllm/_flashmla_C.abi3.so",
        "vllm/model_executor/layers/fused_moe/fused_moe.py",
        "vllm/model_executor/layers/fused_moe/utils.py",
        "vllm/model_executor/layers/fused_moe/configs/"
        "E=32,N=2048,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128,128].json",
        # bf16 experts' tuned tables (no dtype) of the Hopper GPUs only
        "vllm/model_executor/layers/fused_moe/configs/E=128,N=384,device_name=NVIDIA_H200.json",
        "vllm/model_executor/layers/fused_moe/configs/E=128,N=384,device_name=NVIDIA_H100_80GB_HBM3.json",
    }  # the pending DeepGEMM entry's file is not carried
    assert loader.read_manifest(tmp_path / "ek").version == "0.25.0"
    # the folder then stands for the wheel
    res = CliRunner().invoke(
        app, ["collect", "--engine", "vllm", "--engine-files", str(tmp_path / "ek"), "--dry-run"]
    )
    assert res.exit_code == 0 and "engine vllm 0.25.0" in res.output


# ---- the shipped kernel tables rebuild from their campaigns -----------------------------------------------
@pytest.mark.parametrize(
    "campaign, table",
    [
        ("h200_sxm_vllm_moe_0.12.0", "vllm/0.12.0"),
        ("h200_sxm_vllm_deepgemm_moe_0.12.0", "vllm-deepgemm/0.12.0"),
        ("h200_sxm_vllm_marlin_moe_0.24.0", "vllm-marlin/0.24.0"),
    ],
)
def test_the_shipped_vllm_kernel_tables_rebuild_row_for_row_from_their_campaigns(tmp_path, campaign, table):
    into = tmp_path / "h200_sxm" / table
    merge([REPO / "campaigns" / campaign], into)
    shipped = read_table(data_root() / "h200_sxm" / table / "moe.parquet")
    rebuilt = read_table(into / "moe.parquet")

    def rows(t):
        return sorted(json.dumps(r, sort_keys=True) for r in _rows_of(t, 0))

    assert rows(rebuilt) == rows(shipped)
    strip = ("source",)
    assert [{k: v for k, v in p.items() if k not in strip} for p in rebuilt.meta["provenance"]] == [
        {k: v for k, v in p.items() if k not in strip} for p in shipped.meta["provenance"]
    ]
    assert rebuilt.meta["accuracy"] == shipped.meta["accuracy"]

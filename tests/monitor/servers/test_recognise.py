"""monitor/servers: command lines + LLAMA_ARG_* env -> LaunchSpec, and process recognition."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collectors.base import ProcessInfo
from collectors.redact import redact_argv
from monitor.servers import (
    EngineMatch,
    LaunchSpec,
    parse_command,
    parse_llamacpp,
    parse_sglang,
    parse_vllm,
    read_llama_env,
    recognise,
)
from monitor.servers.environ import filter_env

BLOB = "sha256-" + "3f" * 32
BLOB_PATH = f"/usr/share/ollama/.ollama/models/blobs/{BLOB}"


def _spec(cmd: str, env: dict[str, str] | None = None) -> LaunchSpec:
    return parse_llamacpp(shlex.split(cmd), env)


def _fields(spec: LaunchSpec, expected: dict[str, object]) -> dict[str, object]:
    return {k: getattr(spec, k) for k in expected}


# --- llama.cpp command lines ------------------------------------------------------------

LLAMA_CASES = [
    pytest.param(
        r"llama-server -m /m/q.gguf -c 8192 -np 24 -ctk q8_0 -ctv q8_0 -fa on -ub 2048 "
        r'-ngl 99 -ts 3,1 -ot "blk\.(1[0-9])\.ffn_.*_exps=CPU" -md /m/d.gguf -ngld 99 '
        r"-ctkd q4_0",
        dict(
            engine="llama.cpp",
            role="server",
            model_path="/m/q.gguf",
            ctx_size=8192,
            n_parallel=24,
            kv_unified=None,
            cache_type_k="q8_0",
            cache_type_v="q8_0",
            flash_attn="on",
            n_ubatch=2048,
            n_batch=None,
            n_gpu_layers=99,
            tensor_split=(3.0, 1.0),
            override_tensor=(r"blk\.(1[0-9])\.ffn_.*_exps=CPU",),
            draft_model="/m/d.gguf",
            draft_n_gpu_layers=99,
            draft_cache_type_k="q4_0",
            draft_cache_type_v="f16",
            unknown=(),
            from_env=(),
        ),
        id="brief-example",
    ),
    pytest.param(
        "/opt/llama.cpp/build/bin/llama-server --model=/m/x.gguf --ctx-size=4096 "
        "--parallel=2 --flash-attn=off --n-gpu-layers=all --tensor-split=1/1/2 "
        "--split-mode=row --main-gpu=1 --batch-size=4096 --ubatch-size=1024",
        dict(
            model_path="/m/x.gguf",
            ctx_size=4096,
            n_parallel=2,
            flash_attn="off",
            n_gpu_layers="all",
            tensor_split=(1.0, 1.0, 2.0),
            split_mode="row",
            main_gpu=1,
            n_batch=4096,
            n_ubatch=1024,
            unknown=(),
        ),
        id="long-equals-forms",
    ),
    pytest.param(
        "llama-server --model /m/x.gguf --ctx_size 2048 --n_gpu_layers auto --gpu-layers 12",
        dict(ctx_size=2048, n_gpu_layers=12),
        id="underscores-and-last-wins",
    ),
    pytest.param(
        "llama-server -m x.gguf -fa -ngl 99",
        dict(flash_attn="on", n_gpu_layers=99),
        id="bare-fa-old-builds",
    ),
    pytest.param("llama-server -m x.gguf --flash-attn auto", dict(flash_attn="auto"), id="fa-auto"),
    pytest.param(
        "llama-server -m x.gguf -np 4 -kvu", dict(n_parallel=4, kv_unified=True), id="kvu"
    ),
    pytest.param(
        "llama-server -m x.gguf -np -1 --no-kv-unified",
        dict(n_parallel=None, kv_unified=False),
        id="np-auto-no-kvu",
    ),
    pytest.param("llama-server -m x.gguf -no-kvu", dict(kv_unified=False), id="no-kvu-short"),
    pytest.param(
        "llama-server -m x.gguf -ot exps=CPU,blk.3.attn=CUDA1 --override-tensor=b=CPU "
        "-cmoe -ncmoe 12 -nkvo",
        dict(
            override_tensor=("exps=CPU", "blk.3.attn=CUDA1", "b=CPU"),
            cpu_moe=True,
            n_cpu_moe=12,
            no_kv_offload=True,
        ),
        id="placement",
    ),
    pytest.param(
        "llama-server -m t.gguf --spec-draft-model d.gguf --spec-draft-ngl all "
        "--spec-draft-type-k q8_0 -ctvd q8_0 --spec-type draft-mtp --spec-draft-n-max 4",
        dict(
            draft_model="d.gguf",
            draft_n_gpu_layers="all",
            draft_cache_type_k="q8_0",
            draft_cache_type_v="q8_0",
            spec_type="draft-mtp",
            spec_draft_n_max=4,
            unknown=(),
        ),
        id="spec-renamed-flags",
    ),
    pytest.param(
        "llama-server -m t.gguf --model-draft d.gguf --gpu-layers-draft 20 "
        "--n-gpu-layers-draft 30 --cache-type-k-draft q4_0 --cache-type-v-draft q4_1",
        dict(
            draft_model="d.gguf",
            draft_n_gpu_layers=30,
            draft_cache_type_k="q4_0",
            draft_cache_type_v="q4_1",
        ),
        id="spec-old-flags",
    ),
    pytest.param(
        "llama-server -m g.gguf --swa-full --mmproj mm.gguf --no-mmproj-offload "
        "--lora a.gguf --lora b.gguf,c.gguf --lora-scaled d.gguf:0.5",
        dict(
            swa_full=True,
            mmproj="mm.gguf",
            mmproj_offload=False,
            lora=("a.gguf", "b.gguf", "c.gguf", "d.gguf"),
        ),
        id="extras",
    ),
    pytest.param(
        "llama-server -m x.gguf -mm mm.gguf --lora-scaled e.gguf 0.25",
        dict(mmproj="mm.gguf", lora=("e.gguf",), unknown=()),
        id="mm-short-and-old-lora-scaled",
    ),
    pytest.param("llama-server -m x.gguf -lm dio", dict(load_mode="dio"), id="lm-dio"),
    pytest.param(
        "llama-server -m x.gguf --load-mode=mmap+mlock",
        dict(load_mode="mmap+mlock"),
        id="lm-equals",
    ),
    pytest.param("llama-server -m x.gguf --no-mmap", dict(load_mode="none"), id="no-mmap"),
    pytest.param("llama-server -m x.gguf --mlock", dict(load_mode="mmap+mlock"), id="mlock"),
    pytest.param(
        "llama-server -m x.gguf --no-mmap --mlock", dict(load_mode="mlock"), id="no-mmap-mlock"
    ),
    pytest.param("llama-server -m x.gguf -dio", dict(load_mode="dio"), id="direct-io"),
    pytest.param(
        "llama-server -m x.gguf",
        dict(load_mode=None, fit=None, ctx_size=None),
        id="defaults-stay-none",
    ),
    pytest.param(
        "llama-server -m x.gguf --cache-ram -1 -ctxcp 4 -fit off -fitt 512,2048 -fitc 8192",
        dict(
            cache_ram_mib=-1, ctx_checkpoints=4, fit=False, fit_target_mib=(512, 2048), fit_ctx=8192
        ),
        id="host-memory-and-fit",
    ),
    pytest.param(
        "llama-server -m x.gguf -cram 0 --swa-checkpoints 2 --fit on -fitt 1024",
        dict(cache_ram_mib=0, ctx_checkpoints=2, fit=True, fit_target_mib=(1024,)),
        id="fit-on-single-target",
    ),
    pytest.param(
        "llama-server -m e.gguf --embeddings --pooling cls -b 8192 -ub 8192 -np 16 -c 8192",
        dict(embedding=True, pooling="cls", n_batch=8192, n_ubatch=8192, n_parallel=16),
        id="embedding-server",
    ),
    pytest.param(
        "llama-embedding -m e.gguf --embedding", dict(embedding=True), id="llama-embedding"
    ),
    pytest.param(
        "llama-server -m r.gguf --reranking", dict(embedding=True, pooling="rank"), id="rerank"
    ),
    pytest.param(
        "llama-server -m x.gguf --host 0.0.0.0 --port 8080 -a my-model,other",
        dict(host="0.0.0.0", port=8080, model_name="my-model"),
        id="host-alias",
    ),
    pytest.param(
        "llama-server -hf ggml-org/gemma-3-4b-it-GGUF:Q4_K_M --port 8014",
        dict(model_path=None, model_name="ggml-org/gemma-3-4b-it-GGUF:Q4_K_M"),
        id="hf-repo-names-the-model",
    ),
    pytest.param(
        "llama-server -m /m/x.gguf -hfr org/repo", dict(model_name=None), id="hf-ignored-with-m"
    ),
    pytest.param("llama-server -m x.gguf -dev none", dict(devices=("none",)), id="dev-none"),
    pytest.param(
        "llama-server -m x.gguf --device CUDA0,CUDA1",
        dict(devices=("CUDA0", "CUDA1")),
        id="devices",
    ),
    pytest.param(
        # llama-swap config.example.yaml style, ${PORT} resolved as /running shows it
        "/app/llama-server --port 5800 -m /models/Qwen3-30B-A3B-Q4_K_M.gguf -c 32768 -ngl 99 "
        "--jinja -fa on -np 2 --temp 0.7 --top-k 20 -t 8 --no-webui -lv 4",
        dict(port=5800, ctx_size=32768, n_parallel=2, flash_attn="on", unknown=()),
        id="llama-swap-cmd",
    ),
    pytest.param(
        "llama serve -m /m/x.gguf -c 1024",
        dict(ctx_size=1024, unknown=()),
        id="llama-serve-subcommand",
    ),
    pytest.param(
        "llama-cli -m x.gguf -p 'hello there' -n 64 -c 2048",
        dict(ctx_size=2048, unknown=()),
        id="llama-cli",
    ),
]


@pytest.mark.parametrize(("cmd", "expected"), LLAMA_CASES)
def test_llamacpp_command_lines(cmd: str, expected: dict[str, object]) -> None:
    assert _fields(_spec(cmd), expected) == expected


def test_env_only_configuration() -> None:
    env = {
        "LLAMA_ARG_MODEL": "/m/x.gguf",
        "LLAMA_ARG_CTX_SIZE": "8192",
        "LLAMA_ARG_N_PARALLEL": "2",
        "LLAMA_ARG_FLASH_ATTN": "on",
        "LLAMA_ARG_CACHE_TYPE_K": "q8_0",
        "LLAMA_ARG_CACHE_TYPE_V": "q8_0",
        "LLAMA_ARG_KV_UNIFIED": "true",
        "LLAMA_ARG_NO_KV_OFFLOAD": "1",
        "LLAMA_ARG_N_GPU_LAYERS": "all",
        "LLAMA_ARG_NO_MMAP": "1",
        "LLAMA_ARG_FIT_TARGET": "2048",
        "LLAMA_ARG_UBATCH": "1024",
        "LLAMA_ARG_OVERRIDE_TENSOR": "exps=CPU",
        "LLAMA_ARG_SWA_FULL": "1",
        "LLAMA_ARG_SPEC_DRAFT_MODEL": "/m/d.gguf",
        "LLAMA_ARG_N_GPU_LAYERS_DRAFT": "0",
        "LLAMA_ARG_ALIAS": "chat",
        "LLAMA_ARG_PORT": "9000",
        "PATH": "/usr/bin",
        "HF_TOKEN": "hf_nope",  # not LLAMA_ARG_: ignored
    }
    spec = parse_llamacpp(["/usr/bin/llama-server"], env)
    assert _fields(
        spec,
        dict(
            model_path="/m/x.gguf",
            ctx_size=8192,
            n_parallel=2,
            flash_attn="on",
            cache_type_k="q8_0",
            cache_type_v="q8_0",
            kv_unified=True,
            no_kv_offload=True,
            n_gpu_layers="all",
            load_mode="none",
            fit_target_mib=(2048,),
            n_ubatch=1024,
            override_tensor=("exps=CPU",),
            swa_full=True,
            draft_model="/m/d.gguf",
            draft_n_gpu_layers=0,
            model_name="chat",
            port=9000,
            unknown=(),
        ),
    ) == dict(
        model_path="/m/x.gguf",
        ctx_size=8192,
        n_parallel=2,
        flash_attn="on",
        cache_type_k="q8_0",
        cache_type_v="q8_0",
        kv_unified=True,
        no_kv_offload=True,
        n_gpu_layers="all",
        load_mode="none",
        fit_target_mib=(2048,),
        n_ubatch=1024,
        override_tensor=("exps=CPU",),
        swa_full=True,
        draft_model="/m/d.gguf",
        draft_n_gpu_layers=0,
        model_name="chat",
        port=9000,
        unknown=(),
    )
    assert set(spec.from_env) == {
        "model_path",
        "model_name",
        "ctx_size",
        "n_parallel",
        "kv_unified",
        "cache_type_k",
        "cache_type_v",
        "no_kv_offload",
        "swa_full",
        "flash_attn",
        "n_ubatch",
        "n_gpu_layers",
        "override_tensor",
        "draft_model",
        "draft_n_gpu_layers",
        "load_mode",
        "fit_target_mib",
        "port",
    }


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"LLAMA_ARG_KV_OFFLOAD": "off"}, dict(no_kv_offload=True)),
        ({"LLAMA_ARG_KV_OFFLOAD": "on"}, dict(no_kv_offload=False)),
        ({"LLAMA_ARG_NO_KV_OFFLOAD": "0"}, dict(no_kv_offload=False)),
        ({"LLAMA_ARG_KV_UNIFIED": "0"}, dict(kv_unified=False)),
        ({"LLAMA_ARG_NO_KV_UNIFIED": ""}, dict(kv_unified=False)),
        ({"LLAMA_ARG_FLASH_ATTN": "1"}, dict(flash_attn="on")),  # old void-style value
        ({"LLAMA_ARG_LOAD_MODE": "mmap"}, dict(load_mode="mmap")),
        ({"LLAMA_ARG_MLOCK": "1"}, dict(load_mode="mmap+mlock")),
        ({"LLAMA_ARG_MLOCK": "0"}, dict(load_mode=None)),
        (
            {"LLAMA_ARG_CPU_MOE": "true", "LLAMA_ARG_N_CPU_MOE": "3"},
            dict(cpu_moe=True, n_cpu_moe=3),
        ),
        (
            {"LLAMA_ARG_MODEL_DRAFT": "d.gguf", "LLAMA_ARG_CACHE_TYPE_K_DRAFT": "q8_0"},
            dict(draft_model="d.gguf", draft_cache_type_k="q8_0"),
        ),
        (
            {"LLAMA_ARG_EMBEDDINGS": "1", "LLAMA_ARG_POOLING": "mean"},
            dict(embedding=True, pooling="mean"),
        ),
        ({"LLAMA_ARG_HF_REPO": "org/repo:Q8_0"}, dict(model_name="org/repo:Q8_0")),
        ({"LLAMA_ARG_DEVICE": "Vulkan0"}, dict(devices=("Vulkan0",))),
    ],
)
def test_env_spellings(env: dict[str, str], expected: dict[str, object]) -> None:
    assert _fields(parse_llamacpp(["llama-server"], env), expected) == expected


def test_argv_beats_env() -> None:
    env = {
        "LLAMA_ARG_CTX_SIZE": "8192",
        "LLAMA_ARG_N_PARALLEL": "8",
        "LLAMA_ARG_OVERRIDE_TENSOR": "exps=CPU",
        "LLAMA_ARG_LOAD_MODE": "none",
        "LLAMA_ARG_KV_UNIFIED": "1",
    }
    spec = _spec("llama-server -m x.gguf -c 4096 -ot attn=CUDA0 --mlock -no-kvu", env)
    assert spec.ctx_size == 4096
    assert spec.n_parallel == 8
    assert spec.override_tensor == ("attn=CUDA0",)  # the command line replaces the env's
    assert spec.load_mode == "mmap+mlock"
    assert spec.kv_unified is False
    assert spec.from_env == ("n_parallel",)


def test_unknown_removed_and_malformed_flags_are_kept() -> None:
    spec = _spec(
        "llama-server -m x.gguf --draft-max 16 --draft-min 4 -cd 4096 --frobnicate "
        "--wobble 3 --quux=zz -c abc -ngl lots -ts 3,x --port 99999 -sm diagonal "
        "stray -fa maybe -b"
    )
    assert spec.spec_draft_n_max == 16
    assert spec.ctx_size is None and spec.n_gpu_layers is None and spec.port is None
    assert spec.flash_attn == "on"  # "-fa maybe": bare -fa, then a stray word
    assert spec.unknown == (
        "--draft-max=16 (removed upstream)",
        "--draft-min=4 (removed upstream)",
        "-cd=4096 (removed upstream)",
        "--frobnicate",
        "--wobble=3",
        "--quux=zz",
        "-c=abc (invalid value)",
        "-ngl=lots (invalid value)",
        "-ts=3,x (invalid value)",
        "--port=99999 (invalid value)",
        "-sm=diagonal (invalid value)",
        "stray",
        "maybe",
        "-b (missing value)",
    )


def test_missing_value_does_not_swallow_the_next_flag() -> None:
    spec = _spec("llama-server -m -c 512 --alias")
    assert spec.model_path is None and spec.ctx_size == 512
    assert spec.unknown == ("-m (missing value)", "--alias (missing value)")


def test_removed_env_keys() -> None:
    spec = parse_llamacpp(
        ["llama-server"],
        {
            "LLAMA_ARG_DRAFT_MAX": "8",
            "LLAMA_ARG_CTX_SIZE_DRAFT": "2048",
            "LLAMA_ARG_CTX_SIZE": "lots",
        },
    )
    assert spec.spec_draft_n_max == 8
    assert spec.from_env == ("spec_draft_n_max",)
    assert spec.unknown == (
        "LLAMA_ARG_CTX_SIZE=lots (invalid value)",
        "LLAMA_ARG_DRAFT_MAX=8 (removed upstream)",
        "LLAMA_ARG_CTX_SIZE_DRAFT=2048 (removed upstream)",
    )


def test_redacted_values_do_not_break_parsing() -> None:
    argv = redact_argv(
        shlex.split(
            "llama-server --api-key s3cret -hft hf_abcdefghijklmnopqrstuvwx -m /m/x.gguf "
            "--auth --port 8080 -c 4096 --token=abc"
        )
    )
    assert "s3cret" not in argv
    spec = parse_llamacpp(argv)
    assert spec.model_path == "/m/x.gguf" and spec.ctx_size == 4096
    assert "s3cret" not in " ".join(spec.unknown)
    spec = parse_llamacpp(["llama-server", "-c", "<redacted>", "-m", "<redacted>"])
    assert spec.ctx_size is None and spec.model_path == "<redacted>"
    assert spec.unknown == ("-c=<redacted> (invalid value)",)


_TOKENS = st.sampled_from(
    [
        "-m",
        "-c",
        "-np",
        "-fa",
        "-ngl",
        "-ts",
        "-ot",
        "-kvu",
        "--mlock",
        "--no-mmap",
        "-lm",
        "--lora",
        "--draft-max",
        "-fit",
        "--port",
        "--spec-type",
        "-x",
        "--y=1",
        "on",
        "off",
        "auto",
        "all",
        "-1",
        "0",
        "12",
        "3,1",
        "a=CPU",
        "<redacted>",
        "",
        "=",
        "--=",
        "-",
        "--ctx-size=",
        "mmap+mlock",
        "x.gguf",
        "--lora-scaled",
        "0.5",
        "--kv-cache-type",
    ]
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(_TOKENS, max_size=12),
    st.dictionaries(
        st.sampled_from(
            ["LLAMA_ARG_CTX_SIZE", "LLAMA_ARG_FIT", "LLAMA_ARG_KV_UNIFIED", "LLAMA_ARG_MMAP"]
        ),
        _TOKENS,
        max_size=3,
    ),
)
def test_parsers_never_raise(tokens: list[str], env: dict[str, str]) -> None:
    assert parse_llamacpp(["llama-server", *tokens], env).engine == "llama.cpp"
    parse_vllm(["vllm", "serve", *tokens])
    parse_sglang(["python", "-m", "sglang.launch_server", *tokens])
    for head in (["ollama", "runner"], ["ollama"], ["python3"], ["env"], []):
        parse_command([*head, *tokens], env)


# --- ollama -----------------------------------------------------------------------------


def test_ollama_llama_server_runner() -> None:
    argv = shlex.split(
        f"/usr/local/lib/ollama/llama-server --model {BLOB_PATH} --port 41233 "
        "--host 127.0.0.1 --no-webui --offline -c 32768 -np 4 --log-verbosity 4 "
        "--no-log-prefix --no-log-timestamps --cache-type-k q8_0 --cache-type-v q8_0 "
        "--flash-attn on -ngl 49 -t 8"
    )
    spec = parse_command(argv, {"LLAMA_ARG_FIT_TARGET": "1536"})
    assert spec is not None
    assert _fields(
        spec,
        dict(
            engine="ollama",
            role="runner",
            model_path=BLOB_PATH,
            model_name=BLOB,
            ctx_size=32768,
            n_parallel=4,
            kv_unified=False,
            cache_type_k="q8_0",
            flash_attn="on",
            n_gpu_layers=49,
            host="127.0.0.1",
            port=41233,
            fit_target_mib=(1536,),
            unknown=(),
        ),
    ) == dict(
        engine="ollama",
        role="runner",
        model_path=BLOB_PATH,
        model_name=BLOB,
        ctx_size=32768,
        n_parallel=4,
        kv_unified=False,
        cache_type_k="q8_0",
        flash_attn="on",
        n_gpu_layers=49,
        host="127.0.0.1",
        port=41233,
        fit_target_mib=(1536,),
        unknown=(),
    )


@pytest.mark.parametrize(
    ("cmd", "expected"),
    [
        (
            f"/usr/bin/ollama runner --ollama-engine --model {BLOB_PATH} --port 38011",
            dict(
                engine="ollama",
                role="runner",
                model_name=BLOB,
                ctx_size=None,
                port=38011,
                unknown=(),
            ),
        ),
        (
            f"/usr/bin/ollama runner --model {BLOB_PATH} --ctx-size 8192 --batch-size 512 "
            "--n-gpu-layers 33 --threads 8 --parallel 4 --port 42779 --kv-cache-type q8_0 "
            "--flash-attn --multiuser-cache",
            dict(
                ctx_size=8192,
                n_batch=512,
                n_gpu_layers=33,
                n_parallel=4,
                kv_unified=False,
                cache_type_k="q8_0",
                cache_type_v="q8_0",
                flash_attn="on",
                unknown=(),
            ),
        ),
        (
            f"ollama runner -model {BLOB_PATH} -ctx-size 2048 -port 1234",
            dict(model_name=BLOB, ctx_size=2048, port=1234, unknown=()),
        ),
        (
            f"/tmp/ollama123/runners/cuda_v12/ollama_llama_server --model {BLOB_PATH} "
            "--ctx-size 8192 --batch-size 512 --embedding --n-gpu-layers 33 --parallel 4 "
            "--port 42779",
            dict(engine="ollama", role="runner", ctx_size=8192, embedding=True, unknown=()),
        ),
    ],
)
def test_ollama_older_runners(cmd: str, expected: dict[str, object]) -> None:
    spec = parse_command(shlex.split(cmd))
    assert spec is not None and _fields(spec, expected) == expected


def test_ollama_serve_and_clients_load_no_model() -> None:
    assert parse_command(["/usr/local/bin/ollama", "serve"]) is None
    assert parse_command(["ollama", "run", "llama3"]) is None
    assert parse_command(["/usr/bin/llama-swap", "--config", "c.yaml"]) is None
    assert parse_command(["bash", "-l"]) is None
    assert parse_command([]) is None


def test_wrapped_command_takes_env_pairs() -> None:
    spec = parse_command(
        shlex.split(
            "env CUDA_VISIBLE_DEVICES=0 LLAMA_ARG_CTX_SIZE=2048 nice -n 5 "
            "/app/llama-server -m x.gguf -np 2"
        )
    )
    assert spec is not None
    assert (spec.ctx_size, spec.n_parallel, spec.from_env) == (2048, 2, ("ctx_size",))
    spec = parse_command(["/bin/sh", "-c", "exec /app/llama-server -m 'my model.gguf' -c 512"])
    assert spec is not None and (spec.model_path, spec.ctx_size) == ("my model.gguf", 512)
    assert parse_command(["sh", "-c", "echo 'unbalanced"]) is None


# --- vLLM / SGLang ----------------------------------------------------------------------

VLLM_CASES = [
    (
        "vllm serve Qwen/Qwen3-8B --gpu-memory-utilization 0.85 --max-model-len 32768 "
        "--max-num-seqs 64 -tp 2 --port 8001",
        dict(
            engine="vllm",
            role="server",
            model_name="Qwen/Qwen3-8B",
            model_path=None,
            gpu_memory_utilization=0.85,
            max_model_len=32768,
            max_num_seqs=64,
            tensor_parallel_size=2,
            port=8001,
            unknown=(),
        ),
    ),
    (
        "/venv/bin/python3 /venv/bin/vllm serve /models/llama --max-model-len=32k "
        "--kv-cache-memory-bytes 8G --tensor-parallel-size=4 --enforce-eager --dtype auto",
        dict(
            model_name="/models/llama",
            model_path="/models/llama",
            max_model_len=32000,
            kv_cache_memory_bytes=8 * 2**30,
            tensor_parallel_size=4,
            unknown=("--enforce-eager", "--dtype=auto"),
        ),
    ),
    (
        "python -m vllm.entrypoints.openai.api_server --model meta-llama/Llama-3.1-8B "
        "--max_model_len 16K --kv-cache-memory-bytes 8GiB --served-model-name llama",
        dict(
            model_name="meta-llama/Llama-3.1-8B",
            max_model_len=16384,
            kv_cache_memory_bytes=None,
            unknown=("--kv-cache-memory-bytes=8GiB (invalid value)",),
        ),
    ),
    (
        "vllm serve m --max-model-len auto --kv-cache-memory-bytes 2.5g --max-num-seqs 0",
        dict(
            max_model_len=None,
            kv_cache_memory_bytes=2_500_000_000,
            max_num_seqs=None,
            unknown=("--max-num-seqs=0 (invalid value)",),
        ),
    ),
    (
        "python3 -m vllm.entrypoints.cli.main serve org/m --gpu-memory-utilization 1.5x",
        dict(
            model_name="org/m",
            gpu_memory_utilization=None,
            unknown=("--gpu-memory-utilization=1.5x (invalid value)",),
        ),
    ),
]


@pytest.mark.parametrize(("cmd", "expected"), VLLM_CASES)
def test_vllm_command_lines(cmd: str, expected: dict[str, object]) -> None:
    spec = parse_command(shlex.split(cmd))
    assert spec is not None and _fields(spec, expected) == expected


def test_vllm_clients_are_not_servers() -> None:
    assert parse_command(["vllm", "bench", "serve", "--model", "m"]) is None
    assert parse_command(["vllm", "chat"]) is None


def test_sglang() -> None:
    spec = parse_command(
        shlex.split(
            "python3 -m sglang.launch_server --model-path Qwen/Qwen2.5-7B-Instruct "
            "--mem-fraction-static 0.8 --context-length 32768 --tp 2 --port 30000 "
            "--max-running-requests 48 --disable-radix-cache"
        )
    )
    assert spec is not None
    assert _fields(
        spec,
        dict(
            engine="sglang",
            model_name="Qwen/Qwen2.5-7B-Instruct",
            gpu_memory_utilization=0.8,
            max_model_len=32768,
            tensor_parallel_size=2,
            port=30000,
            max_num_seqs=48,
            unknown=("--disable-radix-cache",),
        ),
    ) == dict(
        engine="sglang",
        model_name="Qwen/Qwen2.5-7B-Instruct",
        gpu_memory_utilization=0.8,
        max_model_len=32768,
        tensor_parallel_size=2,
        port=30000,
        max_num_seqs=48,
        unknown=("--disable-radix-cache",),
    )


def test_other_engines_get_a_bare_spec() -> None:
    assert parse_command(["torchrun", "--nproc-per-node", "2", "train.py"]) == LaunchSpec(
        engine="torch"
    )
    assert parse_command(["python", "-m", "text_generation_server.cli", "serve"]) == (
        LaunchSpec(engine="tgi")
    )


# --- recognise --------------------------------------------------------------------------


def _proc(
    pid: int,
    ppid: int | None,
    comm: str,
    argv: str | tuple[str, ...] = "",
    reasons: tuple[str, ...] = (),
) -> ProcessInfo:
    words = tuple(shlex.split(argv)) if isinstance(argv, str) else argv
    return ProcessInfo(
        pid=pid,
        start_ticks=pid * 10,
        started_at_ms=None,
        ppid=ppid,
        uid=1000,
        comm=comm,
        argv=words,
        reasons=reasons,
    )


def _table() -> dict[int, ProcessInfo]:
    procs = [
        _proc(1, None, "systemd", "/sbin/init"),
        # vLLM: API server -> EngineCore -> TP workers
        _proc(
            100,
            1,
            "vllm",
            "/venv/bin/python3 /venv/bin/vllm serve Qwen/Qwen3-32B "
            "-tp 2 --gpu-memory-utilization 0.9 --max-model-len 32768",
        ),
        _proc(101, 100, "VLLM::EngineCor", ("VLLM::EngineCore",)),
        _proc(102, 101, "VLLM::Worker_TP", ("VLLM::Worker_TP0",)),
        _proc(103, 101, "VLLM::Worker_TP", ()),  # cmdline unreadable: comm only
        _proc(
            104,
            100,
            "python3",
            "/venv/bin/python3 -c from multiprocessing.resource_tracker import main;main(11)",
        ),
        _proc(105, 100, "MYAPP::EngineCo", ("MYAPP::EngineCore",)),  # custom prefix
        # ollama serve -> runners (upstream llama-server, and one from another path)
        _proc(200, 1, "ollama", "/usr/local/bin/ollama serve"),
        _proc(
            201,
            200,
            "llama-server",
            f"/usr/local/lib/ollama/llama-server --model {BLOB_PATH} --port 41233 "
            "--host 127.0.0.1 --no-webui --offline -c 8192 -np 2",
        ),
        _proc(
            202,
            200,
            "llama-server",
            "/opt/custom/llama-server --model /srv/m.gguf --port 41234 -c 4096 -np 1",
        ),
        # llama-swap -> two llama-servers
        _proc(300, 1, "llama-swap", "/usr/local/bin/llama-swap --config /etc/llama-swap.yaml"),
        _proc(
            301,
            300,
            "llama-server",
            "/app/llama-server --port 5800 -m /models/a.gguf -c 16384 -np 2",
        ),
        _proc(
            302,
            300,
            "llama-server",
            "/app/llama-server --port 5801 -m /models/emb.gguf --embeddings -ub 8192",
        ),
        # unrelated, a client, a GPU python process, a hand-run server with env config
        _proc(400, 1, "bash", "-bash"),
        _proc(401, 400, "ollama", "ollama run llama3"),
        _proc(402, 400, "weird::name", ("weird::name",)),
        _proc(500, 1, "python3", "python3 my_finetune.py --epochs 3", reasons=("gpu",)),
        _proc(600, 400, "llama-server", "llama-server -m /m/x.gguf"),
        _proc(501, 1, "python3", "python3 offline_vllm_batch.py --model m"),  # vllm library
        _proc(700, 1, "python3", "python3 -m sglang.launch_server --model-path m --tp 2"),
        _proc(701, 700, "sglang::schedu", ("sglang::scheduler_TP0",)),
    ]
    return {p.pid: p for p in procs}


def test_recognise_process_table() -> None:
    envs = {600: {"LLAMA_ARG_CTX_SIZE": "4096", "LLAMA_ARG_N_PARALLEL": "3"}}
    asked: list[int] = []

    def env_for(pid: int) -> dict[str, str]:
        asked.append(pid)
        if pid == 202:
            raise PermissionError(pid)  # unreadable: treated as no env
        return envs.get(pid, {})

    m = recognise(_table(), env_for)
    roles = {pid: (x.engine, x.role, x.owner_pid) for pid, x in m.items()}
    assert roles == {
        100: ("vllm", "server", 100),
        101: ("vllm", "worker", 100),
        102: ("vllm", "worker", 100),
        103: ("vllm", "worker", 100),
        105: ("vllm", "worker", 100),
        200: ("ollama", "server", 200),
        201: ("ollama", "runner", 200),
        202: ("ollama", "runner", 200),
        300: ("llama-swap", "proxy", 300),
        301: ("llama.cpp", "server", 301),
        302: ("llama.cpp", "server", 302),
        500: ("torch", "server", 500),
        501: ("vllm", "server", 501),
        600: ("llama.cpp", "server", 600),
        700: ("sglang", "server", 700),
        701: ("sglang", "worker", 700),
    }
    assert all(isinstance(x, EngineMatch) and x.pid == pid for pid, x in m.items())
    # a worker carries its owner's spec, with its own role
    assert m[102].spec is not None and m[102].spec.role == "worker"
    assert (m[102].spec.model_name, m[102].spec.tensor_parallel_size) == ("Qwen/Qwen3-32B", 2)
    assert m[100].spec is not None and m[100].spec.gpu_memory_utilization == 0.9
    assert m[200].spec is None and m[300].spec is None
    assert m[201].spec is not None and m[201].spec.model_name == BLOB
    assert (m[201].spec.ctx_size, m[201].spec.n_parallel, m[201].spec.kv_unified) == (
        8192,
        2,
        False,
    )
    assert m[202].spec is not None and m[202].spec.engine == "ollama"
    assert m[301].spec is not None and m[301].spec.port == 5800
    assert m[302].spec is not None and m[302].spec.embedding
    assert m[600].spec is not None
    assert (m[600].spec.ctx_size, m[600].spec.n_parallel) == (4096, 3)
    assert m[600].spec.from_env == ("ctx_size", "n_parallel")
    assert m[500].spec == LaunchSpec(engine="torch")
    # env is read only where it can matter: llama.cpp servers/runners and odd titles
    assert set(asked) <= {201, 202, 301, 302, 600, 105, 402}


def test_recognise_worker_without_visible_owner() -> None:
    procs = {7: _proc(7, 1, "VLLM::EngineCor", ("VLLM::EngineCore",))}
    m = recognise(procs)
    assert m[7] == EngineMatch(7, "vllm", "worker", 7, LaunchSpec(engine="vllm", role="worker"))


def test_recognise_custom_prefix_from_env() -> None:
    procs = {8: _proc(8, 1, "ACME::EngineCor", ("ACME::EngineCore",))}
    assert recognise(procs) == {}
    m = recognise(procs, lambda pid: {"VLLM_PROCESS_NAME_PREFIX": "ACME"})
    assert (m[8].engine, m[8].role) == ("vllm", "worker")


def test_recognise_survives_ppid_cycles() -> None:
    procs = {
        10: _proc(10, 11, "VLLM::EngineCor", ("VLLM::EngineCore",)),
        11: _proc(11, 10, "VLLM::Worker_TP", ("VLLM::Worker_TP0",)),
    }
    m = recognise(procs)
    assert {pid: x.owner_pid for pid, x in m.items()} == {10: 10, 11: 11}


# --- environ ----------------------------------------------------------------------------


def test_read_llama_env_from_a_real_process() -> None:
    sleep = shutil.which("sleep")
    assert sleep is not None
    child = subprocess.Popen(
        [sleep, "30"],
        env={
            "LLAMA_ARG_CTX_SIZE": "4096",
            "SECRET_TOKEN": "x",
            "HF_TOKEN": "y",
            "LLAMA_ARG_API_KEY_FILE": "/k",
            "HOME": "/root",
        },
    )
    try:
        deadline = time.monotonic() + 5
        env: dict[str, str] = {}
        while time.monotonic() < deadline:  # environ is empty until exec completes
            env = read_llama_env(Path("/proc"), child.pid)
            if env:
                break
            time.sleep(0.01)
        # HOME locates llama.cpp's -hf cache (monitor/servers/hf_cache.py): a folder, kept
        assert env == {"LLAMA_ARG_CTX_SIZE": "4096", "HOME": "/root"}
    finally:
        child.kill()
        child.wait()
    assert read_llama_env(Path("/proc"), child.pid) == {}  # gone


def test_read_llama_env_filters_a_fixture_tree(tmp_path: Path) -> None:
    pid_dir = tmp_path / "4242"
    pid_dir.mkdir()
    (pid_dir / "environ").write_bytes(
        b"\0".join(
            [
                b"LLAMA_ARG_N_PARALLEL=4",
                b"LLAMA_ARG_HF_TOKEN=hf_secret",
                b"OLLAMA_NUM_PARALLEL=2",
                b"OLLAMA_HOST=http://user:pw@example:11434",
                b"OLLAMA_CONTEXT_LENGTH=8192",
                b"VLLM_PROCESS_NAME_PREFIX=ACME",
                b"VLLM_API_KEY=sk-nope",
                b"AWS_SECRET=x",
                b"LLAMA_ARG_CHAT_TEMPLATE=\xff\xfe",
                b"garbage-without-equals",
                b"=novalue",
                b"\xffKEY=1",
                b"",
            ]
        )
    )
    assert read_llama_env(tmp_path, 4242) == {
        "LLAMA_ARG_N_PARALLEL": "4",
        "OLLAMA_NUM_PARALLEL": "2",
        "OLLAMA_CONTEXT_LENGTH": "8192",
        "VLLM_PROCESS_NAME_PREFIX": "ACME",
    }  # LLAMA_ARG_CHAT_TEMPLATE: not a key the estimator reads, not kept
    (tmp_path / "4243").mkdir()
    (tmp_path / "4243" / "environ").mkdir()  # unreadable as a file
    assert read_llama_env(tmp_path, 4243) == {}
    assert read_llama_env(tmp_path, 999999) == {}
    assert filter_env(b"") == {}


# -- values llama-server itself would refuse or misread: LaunchSpec.refused ------------------


@pytest.mark.parametrize(
    ("args", "refused"),
    [
        ("-c abc", "-c abc: expected an integer (llama-server would refuse it)"),
        ("-c 1e5", "-c 1e5: expected an integer (llama-server would read it as 1)"),
        ("-c 4.5", "-c 4.5: expected an integer (llama-server would read it as 4)"),
        ("-c -5", "-c -5: expected a context size >= 0 (0 = the model's training context)"),
        (
            "-c 99999999999",
            "-c 99999999999: expected an integer within 32 bits (llama-server would refuse it)",
        ),
        ("--ctx-size=", "--ctx-size '': expected an integer (llama-server would refuse it)"),
        ("-np abc", "-np abc: expected an integer (llama-server would refuse it)"),
        (
            "-np 0",
            "-np 0: expected a slot count >= 1, or -1 for auto (llama-server would refuse it)",
        ),
        (
            "-ngl abc",
            "-ngl abc: expected an integer, 'auto' or 'all' (llama-server would refuse it)",
        ),
        (
            "-ngld 9x",
            "-ngld 9x: expected an integer, 'auto' or 'all' (llama-server would read it as 9)",
        ),
        ("-b big", "-b big: expected an integer (llama-server would refuse it)"),
        ("-ub -3", "-ub -3: expected a batch size >= 0"),
        (
            "-ctk q9",
            "-ctk q9: expected one of f32, f16, bf16, q8_0, q4_0, q4_1, iq4_nl, "
            "q5_0, q5_1 (llama-server would refuse it)",
        ),
        (
            "-ctv q2_k",
            "-ctv q2_k: expected one of f32, f16, bf16, q8_0, q4_0, q4_1, iq4_nl, "
            "q5_0, q5_1 (llama-server would refuse it)",
        ),
        (
            "-ctkd turbo",
            "-ctkd turbo: expected one of f32, f16, bf16, q8_0, q4_0, q4_1, "
            "iq4_nl, q5_0, q5_1 (llama-server would refuse it)",
        ),
        (
            "--spec-type draft-mtp,warp",
            "--spec-type draft-mtp,warp: expected speculative "
            "types from none, draft-simple, draft-eagle3, draft-mtp, draft-dflash, "
            "draft-dspark, ngram-simple, ngram-map-k, ngram-map-k4v, ngram-mod, ngram-cache "
            "(llama-server would refuse it)",
        ),
        (
            "--spec-draft-n-max x",
            "--spec-draft-n-max x: expected an integer (llama-server would refuse it)",
        ),
        (
            "--draft-max 1e3",
            "--draft-max 1e3: expected an integer (llama-server would read it as 1)",
        ),
        (
            "-ts 3,x",
            "-ts 3,x: expected proportions separated by ',' or '/', e.g. 3,1 "
            "(llama-server would refuse it)",
        ),
        ("-ncmoe -2", "-ncmoe -2: expected a layer count >= 0 (llama-server would refuse it)"),
        (
            "-sm diagonal",
            "-sm diagonal: expected one of none, layer, row, tensor (llama-server would refuse it)",
        ),
        ("-fa maybe=1", "-fa maybe=1: expected on, off or auto (llama-server would refuse it)"),
        (
            "-ot blk",
            "-ot blk: expected PATTERN=BUFFER_TYPE pairs separated by ',' "
            "(llama-server would refuse it)",
        ),
        ("-cram lots", "-cram lots: expected an integer (llama-server would refuse it)"),
        ("-c", "-c: missing value (llama-server would refuse it)"),
        ("-c '\x1b[2J'", "-c '\\x1b[2J': expected an integer (llama-server would refuse it)"),
    ],
)
def test_values_llama_server_refuses_are_named(args: str, refused: str) -> None:
    if args == "-fa maybe=1":
        spec = parse_llamacpp(["llama-server", "-m", "x.gguf", "--flash-attn=maybe=1"])
        refused = refused.replace("-fa", "--flash-attn")
    else:
        spec = _spec(f"llama-server -m x.gguf {args}")
    assert spec.refused == (refused,)
    assert spec.model_path == "x.gguf"  # the rest still parses


def test_good_values_and_unknown_flags_are_not_refused() -> None:
    spec = _spec(
        "llama-server -m x.gguf -c 0 -np -1 -ngl auto -ngld all -b 4096 -ub 0 "
        "-ctk q8_0 -ctv iq4_nl --spec-type draft-mtp,ngram-mod --spec-type ngram_mod "
        "-ts 3/1 -ncmoe 0 -ot 'exps=CPU,blk\\.1=CUDA0' -c ' 8192 ' --frobnicate 3 "
        "--draft-max 16 stray"
    )
    assert spec.refused == ()
    assert spec.ctx_size == 8192 and spec.n_gpu_layers == "auto" and spec.n_ubatch == 0
    assert "--frobnicate=3" in spec.unknown and "stray" in spec.unknown


def test_refused_environment_values_name_the_key() -> None:
    spec = parse_llamacpp(
        ["llama-server"], {"LLAMA_ARG_CTX_SIZE": "lots", "LLAMA_ARG_MMAP": "perhaps"}
    )
    assert spec.refused == (
        "LLAMA_ARG_CTX_SIZE=lots: expected an integer (llama-server would refuse it)",
        "LLAMA_ARG_MMAP=perhaps: expected on or off (llama-server would refuse it)",
    )

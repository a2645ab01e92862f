"""Existing clients, unchanged, against `codegym serve --http`: the `sandbox-fusion` PyPI client
(SandboxFusion's judge API, what verl calls) and `openenv`'s `GenericEnvClient` (OpenEnv's
WebSocket protocol, what TRL and verifiers use). A real server with real sandboxed Python."""

from __future__ import annotations

import base64
from collections.abc import Iterator

import pytest
from conftest import serve


@pytest.fixture(scope="module")
def http_base(tmp_path_factory) -> Iterator[str]:
    """A server with the HTTP listener; its base URL (`http://127.0.0.1:PORT`)."""
    with serve(tmp_path_factory.mktemp("http-server"), "--http", "127.0.0.1:0", lines=2) as printed:
        prefix = "http listening on "
        assert printed[1].startswith(prefix), printed
        yield "http://" + printed[1][len(prefix) :]


# --- SandboxFusion --------------------------------------------------------------------------------


@pytest.fixture()
def sandbox_fusion(http_base):
    import sandbox_fusion

    sandbox_fusion.set_endpoint(http_base)
    return sandbox_fusion


def _run(sf, **fields):
    # One attempt: a SandboxError would be retried five times and then raise, hiding the cause.
    return sf.run_code(sf.RunCodeRequest(language="python", **fields), max_attempts=1, client_timeout=60)


def test_sandbox_fusion_success(sandbox_fusion):
    r = _run(sandbox_fusion, code="print('Hello, world!')")
    assert r.status == sandbox_fusion.RunStatus.Success
    assert r.message == ""
    assert r.compile_result is None
    assert r.run_result.status == sandbox_fusion.CommandRunStatus.Finished
    assert r.run_result.return_code == 0
    assert r.run_result.stdout == "Hello, world!\n"
    assert r.run_result.stderr == ""


def test_sandbox_fusion_failed_assert(sandbox_fusion):
    r = _run(sandbox_fusion, code="def f(x):\n    return x\n\n\nassert f(1) == 2\n")
    assert r.status == sandbox_fusion.RunStatus.Failed
    assert r.run_result.status == sandbox_fusion.CommandRunStatus.Finished
    assert r.run_result.return_code != 0
    assert "AssertionError" in r.run_result.stderr


def test_sandbox_fusion_timeout(sandbox_fusion):
    r = _run(sandbox_fusion, code="import time\ntime.sleep(30)\n", run_timeout=1)
    assert r.status == sandbox_fusion.RunStatus.Failed
    assert r.run_result.status == sandbox_fusion.CommandRunStatus.TimeLimitExceeded
    assert r.run_result.return_code is None


def test_sandbox_fusion_stdin(sandbox_fusion):
    r = _run(sandbox_fusion, code="a, b = map(int, input().split())\nprint(a + b)\n", stdin="2 40\n")
    assert r.status == sandbox_fusion.RunStatus.Success
    assert r.run_result.stdout == "42\n"


def test_sandbox_fusion_files_in_and_fetched_out(sandbox_fusion):
    r = _run(
        sandbox_fusion,
        code="data = open('in.txt').read()\nopen('out.txt', 'w').write(data.upper())\nprint(len(data))\n",
        files={"in.txt": base64.b64encode(b"hello").decode()},
        fetch_files=["out.txt", "missing.txt"],
    )
    assert r.status == sandbox_fusion.RunStatus.Success, r
    assert r.run_result.stdout == "5\n"
    assert r.run_result.stderr == ""
    assert r.files == {"out.txt": base64.b64encode(b"HELLO").decode()}


def test_sandbox_fusion_fetches_files_of_a_run_killed_by_its_time_limit(sandbox_fusion):
    # The sandbox reads fetched files after the run, however it ended.
    r = _run(
        sandbox_fusion,
        code="open('partial.txt', 'w').write('step 1 done')\nimport time\ntime.sleep(30)\n",
        run_timeout=1,
        fetch_files=["partial.txt"],
    )
    assert r.run_result.status == sandbox_fusion.CommandRunStatus.TimeLimitExceeded
    assert r.files == {"partial.txt": base64.b64encode(b"step 1 done").decode()}


def test_sandbox_fusion_async_client_and_concurrent_helper(sandbox_fusion):
    import asyncio

    async def one(i):
        req = sandbox_fusion.RunCodeRequest(language="python", code=f"print({i} * {i})")
        return await sandbox_fusion.run_code_async(req, max_attempts=1, client_timeout=60)

    async def many():
        return await asyncio.gather(*(one(i) for i in range(16)))

    for i, r in enumerate(asyncio.run(many())):
        assert r.status == sandbox_fusion.RunStatus.Success
        assert r.run_result.stdout == f"{i * i}\n"

    # The SDK's own thread-pool helper and its result summary, as its README uses them.
    reqs = [[sandbox_fusion.RunCodeRequest(language="python", code=code)] for code in ("print(1)", "exit(2)")]
    results = sandbox_fusion.run_concurrent(sandbox_fusion.run_code, args=reqs, concurrency=2)
    mapping = sandbox_fusion.SummaryMapping(Success="ok", Failed="failed", RunFailed="run-failed")
    summaries = [sandbox_fusion.summary_run_code_result(r, mapping) for r in results]
    assert summaries == ["ok", "run-failed"]


# --- OpenEnv --------------------------------------------------------------------------------------


def test_openenv_generic_client_runs_a_coding_episode(http_base):
    from openenv.core import GenericEnvClient

    with GenericEnvClient(base_url=f"{http_base}/openenv/codegym/Code-v0").sync() as env:
        r = env.reset(task_id="hello-world", seed=0)
        assert r.done is False
        assert "prompt" in r.observation["metadata"]
        assert r.observation["metadata"]["task_id"] == "hello-world"
        r = env.step({"code": "print('Hello, world?')"})
        assert r.observation["exit_code"] == 0, r.observation
        assert r.reward < 1.0
        assert r.done is False
        r = env.step({"code": "print('Hello, world!')"})
        assert r.observation["stdout"] == "Hello, world!\n"
        assert r.reward == pytest.approx(1.0)
        assert r.done is True
        assert r.observation["metadata"]["solved"] is True
        state = env.state()
        assert state["step_count"] == 2


def test_openenv_generic_client_runs_a_cartpole_episode(http_base):
    from openenv.core import GenericEnvClient

    with GenericEnvClient(base_url=f"{http_base}/openenv/classic/CartPole-v1").sync() as env:
        r = env.reset(seed=7)
        assert len(r.observation["observation"]) == 4
        total, steps = 0.0, 0
        while not r.done:
            pole_angle = r.observation["observation"][2]
            r = env.step({"action": 1 if pole_angle > 0 else 0})
            total += r.reward
            steps += 1
        assert total == steps
        assert steps >= 10


def test_openenv_schema_validates_what_the_server_sends(http_base):
    import jsonschema
    import requests
    from openenv.core import GenericEnvClient

    base = f"{http_base}/openenv/codegym/Code-v0"
    schema = requests.get(f"{base}/schema", timeout=30).json()
    assert requests.get(f"{base}/health", timeout=30).json() == {"status": "healthy"}
    jsonschema.validate({"code": "print(1)"}, schema["action"])
    with GenericEnvClient(base_url=base).sync() as env:
        r = env.reset()
        jsonschema.validate(r.observation, schema["reset_observation"])
        r = env.step({"code": "import sys\nprint('out')\nprint('err', file=sys.stderr)\nsys.exit(3)\n"})
        jsonschema.validate(r.observation, schema["observation"])
        assert r.observation["exit_code"] == 3
        assert r.observation["stderr"] == "err\n"
        with pytest.raises(RuntimeError, match="VALIDATION_ERROR"):
            env.step({"cod": "typo"})


# --- SandboxFusion dataset endpoints (`--http-dataset NAME=PATH`) ---------------------------------

_MBPP_LINE = (
    '{"task_id": 11, "text": "Write a function to square a number.", '
    '"code": "def square(x):\\n    return x * x", '
    '"test_list": ["assert square(2) == 4", "assert square(3) == 9"], "test_setup_code": ""}\n'
)


@pytest.fixture(scope="module")
def dataset_base(tmp_path_factory) -> Iterator[str]:
    """A server serving a one-task MBPP file as SandboxFusion dataset `mbpp`."""
    log_dir = tmp_path_factory.mktemp("dataset-server")
    data = log_dir / "mbpp.jsonl"
    data.write_text(_MBPP_LINE)
    args = ("--http", "127.0.0.1:0", "--http-dataset", f"mbpp={data}")
    with serve(log_dir, *args, lines=2) as printed:
        prefix = "http listening on "
        assert printed[1].startswith(prefix), printed
        yield "http://" + printed[1][len(prefix) :]


def test_sandbox_fusion_client_gets_prompts_and_submits(dataset_base):
    import sandbox_fusion as sf

    prompts = sf.get_prompts(sf.GetPromptsRequest(dataset="mbpp", config=sf.TestConfig()), endpoint=dataset_base)
    assert [p.id for p in prompts] == [11]
    assert "assert square(2) == 4" in prompts[0].prompt

    def submit(completion):
        request = sf.SubmitRequest(dataset="mbpp", id=11, completion=completion, config=sf.TestConfig())
        return sf.submit(request, endpoint=dataset_base, max_attempts=1, client_timeout=60)

    right = submit("```python\ndef square(x):\n    return x * x\n```")
    assert right.accepted, right
    assert right.tests and all(t.passed for t in right.tests)
    wrong = submit("```python\ndef square(x):\n    return x + x\n```")
    assert not wrong.accepted
    failed = [t for t in wrong.tests if not t.passed]
    assert failed and "AssertionError" in failed[0].exec_info.run_result.stderr

"""Yes/no VLM judge: probability from logits, tiny LLaVA in process, OpenAI-compatible HTTP path.

The HTTP tests run a real server on 127.0.0.1 (http.server in a thread) that answers chat
completions with log-probabilities computed by the same tiny in-process judge, so both paths
must agree; special model names make it answer malformed responses for the error tests.
"""

from __future__ import annotations

import base64
import io
import json
import math
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest
import torch
import vlm_tiny

from rewards.vlm_judge import (
    JudgeConfig,
    JudgeVLMReward,
    TransformersJudge,
    TransformersJudgeConfig,
    answer_token_ids,
    yes_probability,
)
from rewards.vlm_judge_openai import (
    OpenAIJudgeClient,
    OpenAIJudgeConfig,
    decode_jpeg_data_url,
    encode_jpeg_data_url,
    top_logprobs_of,
    yes_probability_from_logprobs,
)
from robot_rl.core.protocols import RewardModel, RewardQuery

YES, YES_CAP = vlm_tiny.JUDGE_WORDS.index("yes"), vlm_tiny.JUDGE_WORDS.index("Yes")
NO, NO_CAP = vlm_tiny.JUDGE_WORDS.index("no"), vlm_tiny.JUDGE_WORDS.index("No")
JUDGE = JudgeConfig(cameras=("front", "wrist"), question_template="task: {task} done?")


def test_yes_probability_sums_spellings_and_normalises_over_the_two_answers() -> None:
    logits = torch.full((3, 10), -2.0)
    logits[0, [1, 2, 3]] = torch.tensor([math.log(1.0), math.log(2.0), math.log(1.0)])
    logits[1, [1, 2, 3]] = torch.tensor([0.0, -1000.0, 5.0])
    logits[2, :] = 1000.0  # huge but equal: stable and 1/2 per token -> 2/3 for two yes ids
    p = yes_probability(logits, yes_ids=[1, 2], no_ids=[3])
    torch.testing.assert_close(p, torch.tensor([0.75, 1 / (1 + math.exp(5.0)), 2 / 3]))
    with pytest.raises(ValueError, match="overlap"):
        yes_probability(logits, [1, 2], [2])
    with pytest.raises(ValueError, match=r"\[0, 10\)"):
        yes_probability(logits, [1], [10])
    with pytest.raises(ValueError, match=r"\(B, V\)"):
        yes_probability(logits[0], [1], [2])


def test_logprob_reading_handles_spellings_missing_tokens_and_nothing() -> None:
    pairs = [("\u2581Yes", math.log(0.3)), (" yes", math.log(0.1)), ("No", math.log(0.2))]
    assert yes_probability_from_logprobs(pairs, ("yes",), ("no",)) == pytest.approx(0.4 / 0.6)
    assert yes_probability_from_logprobs(pairs[:2], ("yes",), ("no",)) == 1.0  # no: below top-k
    with pytest.raises(ValueError, match="neither"):
        yes_probability_from_logprobs([("maybe", -0.1)], ("yes",), ("no",))


@pytest.fixture(scope="module")
def judge(tmp_path_factory) -> TransformersJudge:
    path = vlm_tiny.build_llava(tmp_path_factory.mktemp("judge") / "llava")
    return TransformersJudge(TransformersJudgeConfig(model_dir=str(path), batch_size=2))


def make_query(seed: int, batch: int = 3, task: str | None = "pick cube") -> RewardQuery:
    rng = np.random.default_rng(seed)
    return RewardQuery(
        images={
            "front": rng.integers(0, 256, (batch, 20, 24, 3), dtype=np.uint8),
            "wrist": rng.integers(0, 256, (batch, 16, 16, 3), dtype=np.uint8),
        },
        task_text=task,
    )


def test_answer_tokens_are_the_single_token_spellings(judge) -> None:
    assert judge.answer_ids(("yes",)) == (YES, YES_CAP)
    assert answer_token_ids(judge.tokenizer, ("no",)) == (NO, NO_CAP)
    with pytest.raises(ValueError, match="single token"):
        answer_token_ids(judge.tokenizer, ("maybe",))


def test_in_process_judge_gives_probabilities_from_the_answer_logits(judge) -> None:
    reward = JudgeVLMReward(JUDGE, judge)
    assert isinstance(reward, RewardModel)
    query = make_query(0)
    result = reward.predict(query)
    assert result.success_prob.shape == (3,) and result.success_prob.dtype == np.float32
    assert np.all((result.success_prob > 0) & (result.success_prob < 1))
    np.testing.assert_array_equal(result.reward, result.success_prob - np.float32(1))
    np.testing.assert_array_equal(reward.predict(query).success_prob, result.success_prob)
    # Independent of the reward class: softmax over the 4 answer tokens of the raw logits.
    front = judge.next_token_logits(query.images["front"], "task: pick cube done?")
    wrist = judge.next_token_logits(query.images["wrist"], "task: pick cube done?")
    for logits in (front, wrist):
        assert logits.shape == (3, len(vlm_tiny.JUDGE_WORDS))
    expected = [
        torch.softmax(lg[:, [YES, YES_CAP, NO, NO_CAP]], dim=1)[:, :2].sum(1)
        for lg in (front, wrist)
    ]
    np.testing.assert_allclose(
        result.success_prob, ((expected[0] + expected[1]) / 2).numpy(), atol=1e-6
    )
    other_task = reward.predict(make_query(0, task="place cube")).success_prob
    assert not np.allclose(other_task, result.success_prob)  # the task text reaches the model


def test_chat_template_prompt_is_used_when_the_processor_has_one(judge, tmp_path) -> None:
    path = vlm_tiny.build_llava(tmp_path / "chat", chat_template=vlm_tiny.CHAT_TEMPLATE)
    chat = TransformersJudge(TransformersJudgeConfig(model_dir=str(path)))
    assert chat.prompt("task: pick cube done?") == "USER: <image>\ntask: pick cube done? ASSISTANT:"
    assert chat.prompt("q") == judge.prompt("q")  # same weights (seed 0), same rendered prompt
    query = make_query(4)
    np.testing.assert_allclose(
        JudgeVLMReward(JUDGE, chat).predict(query).success_prob,
        JudgeVLMReward(JUDGE, judge).predict(query).success_prob,
        atol=1e-6,
    )
    raw = TransformersJudge(TransformersJudgeConfig(model_dir=str(path), use_chat_template=False))
    with pytest.raises(ValueError, match="raw_prompt_format"):
        TransformersJudgeConfig(model_dir=str(path), raw_prompt_format="{question}")
    assert raw.prompt("q") == judge.prompt("q")


def test_biasing_the_yes_output_embedding_raises_the_probability(judge) -> None:
    reward = JudgeVLMReward(JUDGE, judge)
    query = make_query(1)
    before = reward.predict(query).success_prob

    def bias_yes(_module, _inputs, logits: torch.Tensor) -> torch.Tensor:
        logits = logits.clone()
        logits[..., YES] += 3.0
        return logits

    handle = judge.model.get_output_embeddings().register_forward_hook(bias_yes)
    try:
        biased = reward.predict(query).success_prob
    finally:
        handle.remove()
    assert np.all(biased > before + 0.01)
    np.testing.assert_array_equal(reward.predict(query).success_prob, before)


def test_judge_needs_a_task_and_the_cameras(judge) -> None:
    reward = JudgeVLMReward(JUDGE, judge)
    with pytest.raises(ValueError, match="task"):
        reward.predict(make_query(0, task=None))
    fallback = JudgeVLMReward(
        JudgeConfig(("front",), "task: {task} done?", task_text="pick cube"), judge
    )
    assert fallback.predict(make_query(0, task=None)).success_prob.shape == (3,)
    with pytest.raises(KeyError, match="wrist"):
        reward.predict(RewardQuery(images={"front": make_query(0).images["front"]}, task_text="x"))
    with pytest.raises(ValueError, match="task"):
        JudgeConfig(("front",), question_template="is it done?")
    with pytest.raises(ValueError, match="overlap"):
        JudgeConfig(("front",), yes_words=("yes", "ok"), no_words=("OK",))


# -- OpenAI-compatible server on loopback ------------------------------------------------------


class TinyServer:
    """Chat-completions server backed by the tiny judge; ``model`` picks the behaviour."""

    def __init__(self, judge: TransformersJudge) -> None:
        self.judge = judge
        self.requests: list[dict] = []
        self.release = threading.Event()
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_args) -> None:  # keep test output quiet
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append(body)
                status, answer = outer.answer(self.path, body)
                data = answer if isinstance(answer, bytes) else json.dumps(answer).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout test)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def answer(self, path: str, body: dict) -> tuple[int, object]:
        model = body["model"]
        if path != "/v1/chat/completions":
            return 404, {"error": f"no route {path}"}
        if model == "http-500":
            return 500, {"error": "boom"}
        if model == "not-json":
            return 200, b"<html>hello</html>"
        if model == "no-logprobs":
            return 200, {"choices": [{"message": {"content": "yes"}, "logprobs": None}]}
        if model == "no-answer":
            top = [{"token": "maybe", "logprob": -0.1}, {"token": "the", "logprob": -3.0}]
            return 200, {"choices": [{"logprobs": {"content": [{"top_logprobs": top}]}}]}
        if model == "slow":
            self.release.wait(timeout=10.0)
            return 200, {"choices": []}
        assert model == "tiny-judge", model
        if (body["max_tokens"], body["logprobs"], body["top_logprobs"]) != (1, True, 20):
            return 400, {"error": "expected max_tokens=1, logprobs=true, top_logprobs=20"}
        image_part, text_part = body["messages"][0]["content"]
        url = image_part["image_url"]["url"]
        assert url.startswith("data:image/jpeg;base64,")
        from PIL import Image

        with Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1]))) as img:
            assert img.format == "JPEG"
            pixels = np.asarray(img.convert("RGB"))[None]
        with self.lock:
            logprobs = torch.log_softmax(
                self.judge.next_token_logits(pixels, text_part["text"]), 1
            )[0]
        order = torch.argsort(logprobs, descending=True)[:20].tolist()
        tokens = self.judge.tokenizer.convert_ids_to_tokens(order)
        top = [
            {"token": t, "logprob": logprobs[i].item()} for t, i in zip(tokens, order, strict=True)
        ]
        content = [{"token": tokens[0], "logprob": top[0]["logprob"], "top_logprobs": top}]
        return 200, {
            "choices": [{"message": {"content": tokens[0]}, "logprobs": {"content": content}}]
        }


@pytest.fixture(scope="module")
def server(judge) -> Iterator[TinyServer]:
    srv = TinyServer(judge)
    thread = threading.Thread(target=srv.httpd.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.release.set()
    srv.httpd.shutdown()
    srv.httpd.server_close()
    thread.join(timeout=10.0)


def client(server: TinyServer, model: str = "tiny-judge", **kw) -> OpenAIJudgeClient:
    return OpenAIJudgeClient(OpenAIJudgeConfig(base_url=server.base_url, model=model, **kw))


def test_openai_client_agrees_with_the_in_process_judge(judge, server) -> None:
    query = make_query(2)
    remote = JudgeVLMReward(JUDGE, client(server)).predict(query)
    # The server sees the JPEG-decoded pixels; judge those in process too.
    jpeg = {
        cam: np.stack([decode_jpeg_data_url(encode_jpeg_data_url(im, 90)) for im in ims])
        for cam, ims in query.images.items()
    }
    local = JudgeVLMReward(JUDGE, judge).predict(RewardQuery(images=jpeg, task_text="pick cube"))
    np.testing.assert_allclose(remote.success_prob, local.success_prob, atol=1e-5)
    assert remote.model_version != local.model_version and remote.model_id == "vlm_judge"
    last = server.requests[-1]
    assert last["messages"][0]["content"][1]["text"] == "task: pick cube done?"
    assert last["temperature"] == 0.0


def test_malformed_server_answers_give_clear_errors(server) -> None:
    images = make_query(3, batch=1).images["front"]
    args = (images, "task: pick cube done?", ("yes",), ("no",))
    with pytest.raises(ValueError, match="logprobs"):
        client(server, "no-logprobs").yes_probability(*args)
    with pytest.raises(ValueError, match=r"neither .* \['maybe'"):
        client(server, "no-answer").yes_probability(*args)
    with pytest.raises(ValueError, match="non-JSON"):
        client(server, "not-json").yes_probability(*args)
    with pytest.raises(RuntimeError, match="HTTP 500"):
        client(server, "http-500").yes_probability(*args)
    with pytest.raises(TimeoutError, match="within 0.2 s"):
        client(server, "slow", timeout_s=0.2).yes_probability(*args)
    server.release.set()
    with pytest.raises(ValueError, match="top_logprobs"):
        top_logprobs_of({"choices": [{"logprobs": {"content": []}}]})


def test_unreachable_server_and_bad_client_configs() -> None:
    import socket

    with socket.socket() as sock:  # a port that was free a moment ago: nothing listens there
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    dead = OpenAIJudgeClient(OpenAIJudgeConfig(base_url=f"http://127.0.0.1:{port}/v1", model="m"))
    with pytest.raises(ConnectionError, match="cannot reach"):
        dead.yes_probability(np.zeros((1, 8, 8, 3), np.uint8), "q", ("yes",), ("no",))
    with pytest.raises(ValueError, match="http"):
        OpenAIJudgeConfig(base_url="127.0.0.1:8000/v1", model="m")
    with pytest.raises(ValueError, match="top_logprobs"):
        OpenAIJudgeConfig(base_url="http://x/v1", model="m", top_logprobs=50)
    with pytest.raises(ValueError, match="ROBOT_RL_TEST_UNSET_KEY"):
        OpenAIJudgeClient(
            OpenAIJudgeConfig(
                base_url="http://x/v1", model="m", api_key_env="ROBOT_RL_TEST_UNSET_KEY"
            )
        )

"""`seq2seq serve`: the HTTP API in process (every endpoint, limit and malformed input), and
the real server on 127.0.0.1 (concurrent clients, graceful stop on SIGTERM)."""

from __future__ import annotations

import re
import signal
import socket
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
from cli_helpers import run_cli
from serve_helpers import start_server

pytest.importorskip("fastapi", reason="the serve extra is not installed: pip install -e '.[serve]'")
pytest.importorskip("httpx2", reason="the serve extra is not installed: pip install -e '.[serve]'")
import httpx2  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402

from seq2seq.config import DecodeConfig, ModelConfig  # noqa: E402
from seq2seq.data.tokenizer import PAD_ID  # noqa: E402
from seq2seq.decode.translate import Translator  # noqa: E402
from seq2seq.models import build_model  # noqa: E402
from seq2seq.serve.app import create_app  # noqa: E402
from seq2seq.serve.schema import ServeLimits  # noqa: E402
from seq2seq.serve.server import model_info  # noqa: E402

LINES = ["boka mimi toto tape podo", "", "toto", "mimi tape podo boka"]
DOC = Path(__file__).resolve().parent.parent / "docs/serve.md"


def client_of(translator: Translator, **limits) -> TestClient:
    settings = ServeLimits(**limits)
    return TestClient(create_app(translator, model_info(translator, settings), settings))


@pytest.fixture(scope="module")
def translator(trained) -> Translator:
    return Translator.load(trained)


@pytest.fixture(scope="module")
def client(translator):
    with client_of(translator, max_lines=8, max_chars=100, max_beam=6) as client:
        yield client


def test_translations_come_back_in_input_order_as_the_translator_gives_them(client, translator):
    answer = client.post("/translate", json={"text": LINES, "beam": 3})
    assert answer.status_code == 200
    body = answer.json()
    assert [line["text"] for line in body["translations"]] == translator.translate(LINES, beam=3)
    assert body["beam"] == 3 and body["translations"][1] == {
        "text": "", "truncated": False, "unconstrained": False, "hypotheses": [],
    }  # fmt: skip
    assert body["translations"][0]["hypotheses"][0]["attention"] is None  # not asked for


def test_nbest_gives_sorted_scored_hypotheses_and_the_run_beam_by_default(client, translator):
    body = client.post("/translate", json={"text": LINES, "nbest": 3}).json()
    expected = translator.hypotheses(LINES, nbest=3)
    assert body["beam"] == translator.decode.beam
    for line, found in zip(body["translations"], expected, strict=True):
        assert [h["text"] for h in line["hypotheses"]] == [t.text for t in found]
        scores = [h["score"] for h in line["hypotheses"]]
        assert scores == sorted(scores, reverse=True)
        assert scores == pytest.approx([t.score for t in found], abs=1e-4)


def test_prefixes_and_samples_are_the_translators(client, translator):
    prefixes = ["Za", "", "ri ", "  two  spaces"]
    body = client.post("/translate", json={"text": LINES, "prefix": prefixes, "beam": 3,
                                           "nbest": 2}).json()  # fmt: skip
    found = [[h["text"] for h in line["hypotheses"]] for line in body["translations"]]
    assert found == translator.translate(LINES, beam=3, nbest=2, prefixes=prefixes)
    assert all(text.startswith(prefixes[3]) for text in found[3])
    sample = {
        "sample": True,
        "seed": 7,
        "nbest": 3,
        "top_k": 20,
        "temperature": 1.5,
        "epsilon": 0.01,
    }
    body = client.post("/translate", json={"text": LINES, **sample}).json()
    found = [[h["text"] for h in line["hypotheses"]] for line in body["translations"]]
    assert body["beam"] == 1 and found == translator.translate(LINES, **sample)


def test_a_seeded_sample_is_the_same_alone_and_in_a_batch_it_shares(translator):
    ask = {"text": ["toto", "mimi tape"], "prefix": ["", "Za"], "sample": True, "seed": 3}
    other = {"text": ["boka mimi", "tape", "podo"], "sample": True, "seed": 3}
    with client_of(translator, batch_wait=0.5) as client:
        alone = client.post("/translate", json=ask).json()
        batches = client.get("/health").json()["batches"]
        with ThreadPoolExecutor(2) as pool:
            answers = pool.map(lambda body: client.post("/translate", json=body).json(),
                               [other, ask])  # fmt: skip
            shared = list(answers)[1]
        assert client.get("/health").json()["batches"] == batches + 1  # one search for both
    assert shared == alone


def test_attention_comes_with_the_pieces_that_label_it(client, translator):
    body = client.post("/translate", json={"text": LINES[:1], "attention": True}).json()
    attention = body["translations"][0]["hypotheses"][0]["attention"]
    best = translator.hypotheses(LINES[:1])[0][0]
    pieces = translator.tokenizer.src_pieces(LINES[0])
    assert attention["source"] == [*pieces, "</s>"] and attention["heads"] is None
    assert len(attention["target"]) == len(best.tokens) + 1 and attention["target"][-1] == "</s>"
    weights = torch.tensor(attention["weights"])
    assert weights.shape == (len(attention["target"]), len(attention["source"]))
    torch.testing.assert_close(weights, best.attention, atol=1e-4, rtol=0)


def test_multi_head_attention_comes_per_head(trained, translator):
    cfg = ModelConfig(arch="transformer", embed_dim=16, hidden_dim=16, ff_dim=32,
                      attention={"type": "multihead", "heads": 2})  # fmt: skip
    tokenizer = translator.tokenizer
    model = build_model(cfg, tokenizer.src_vocab_size, tokenizer.tgt_vocab_size, PAD_ID)
    transformer = Translator(model, tokenizer, translator.decode, torch.device("cpu"), 30,
                             translator.origin)  # fmt: skip
    with client_of(transformer) as client:
        body = client.post("/translate", json={"text": LINES[:1], "attention": True}).json()
    attention = body["translations"][0]["hypotheses"][0]["attention"]
    weights = torch.tensor(attention["weights"])
    assert attention["heads"] == 2
    assert weights.shape == (len(attention["target"]), 2, len(attention["source"]))
    torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:2]), atol=1e-3, rtol=0)


def test_health_info_and_the_page(client, translator):
    assert client.get("/health").json()["status"] == "ok"
    info = client.get("/info").json()
    assert info["languages"] == {
        "source": "src",
        "target": "tgt",
        "pairs": [["src", "tgt"]],
        "tgt_lang": [],
    }
    assert info["model"]["attention"] == {"type": "bahdanau", "heads": 1, "normalizer": "softmax"}
    assert info["model"]["parameters"] == sum(p.numel() for p in translator.model.parameters())
    assert info["checkpoint"]["name"] == "best" and info["checkpoint"]["step"] > 0
    assert info["threads"] == "free"  # none given: those other work leaves, batch by batch
    assert set(info["versions"]) >= {"seq2seq", "torch", "fastapi", "uvicorn", "python"}
    page = client.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    # Self-contained: nothing is fetched from elsewhere (the SVG namespace is a name only).
    assert not re.search(r"(src|href)\s*=|<link|@import|url\(", page.text)
    assert set(re.findall(r"https?://[^\s\"'`]+", page.text)) == {"http://www.w3.org/2000/svg"}
    # What the page cannot ask, it says where to ask it.
    api = re.search(r'<p id="api">(.*?)</p>', page.text, re.S).group(1)
    assert all(word in api for word in ("Sampling", "prefixes", "constraints", "POST /translate"))


@pytest.mark.parametrize(
    "body, status, fragment",
    [
        ({"text": ["toto"] * 9}, 413, "9 lines in one request; send at most 8"),
        ({"text": ["toto", "a" * 101]}, 413, "text.1 has 101 characters"),
        ({"text": ["toto"], "beam": 7}, 422, "beam: 7 is wider than this server allows (6)"),
        ({"text": ["toto"], "beam": 2, "nbest": 3}, 422, '"nbest": 3 needs a beam at least'),
        ({"text": ["toto"], "beam": 0}, 422, "beam = 0: Input should be greater than or equal"),
        ({"text": ["toto"], "beam": "5"}, 422, "beam: Input should be a valid integer"),
        ({"text": ["toto"], "attention": "yes"}, 422, "attention: Input should be a valid bool"),
        ({"text": "toto"}, 422, "text: Input should be a valid list"),
        ({"text": ["toto", 5]}, 422, "text.1: Input should be a valid string"),
        ({"text": []}, 422, "text: List should have at least 1 item"),
        ({}, 422, "text: Field required"),
        ({"text": ["toto"], "run": "/etc"}, 422, "unknown field 'run'; allowed: text, beam"),
        (["toto"], 422, "the body is an array, not a JSON object; send one such as {"),
        ("toto", 422, "the body is a string, not a JSON object"),
        (5, 422, "the body is a number, not a JSON object"),
        ({"text": ["toto", "tape"], "prefix": ["a"]}, 422, "prefix and text differ in length (1"),
        ({"text": ["toto"], "prefix": [5]}, 422, "prefix.0: Input should be a valid string"),
        ({"text": ["toto"], "prefix": ["a" * 101]}, 413, "prefix.0 has 101 characters"),
        ({"text": ["toto"], "prefix": ["a\tb"]}, 422, "prefix.0: character 1 is a tab, which"),
        ({"text": ["toto"], "prefix": ["a"] * 9}, 413, "9 prefixes in one request; send at most"),
        ({"text": ["toto"], "sample": True, "beam": 2}, 422, "not in a beam of 2; set beam 1"),
        ({"text": ["toto"], "sample": True, "top_p": 0}, 422, "top_p = 0.0: Input should be gr"),
        ({"text": ["toto"], "temperature": 0.5}, 422, "temperature shapes sampling; set sample"),
        ({"text": ["toto"], "sample": True, "nbest": 7}, 422, "nbest: 7 samples per line are mo"),
        ({"text": ["toto"], "sample": True, "mbr": 7}, 422, "mbr: 7 samples per line are more"),
        ({"text": ["toto"], "mbr": 5, "beam": 4}, 422, "mbr 5 chooses among a beam's 5 best"),
        ({"text": ["toto"], "mbr_utility": "ter"}, 422, "mbr_utility = 'ter': Input should be"),
        ({"text": ["toto"], "seed": "1"}, 422, "seed: Input should be a valid integer"),
        ({"text": ["toto", "tape"], "constraints": [[]]}, 422, "constraints and text differ in l"),
        ({"text": ["toto"], "constraints": [["a", " "]]}, 422, "constraints.0: an empty phrase"),
        ({"text": ["toto"], "constraints": [["a\tb"]]}, 422, "constraints.0: character 1 is a tab"),
        ({"text": ["toto"], "constraints": ["a"]}, 422, "constraints.0: Input should be a valid"),
        ({"text": ["toto"], "constraints": [["a" * 100]]}, 413, "constraints.0 has 101 charac"),
        ({"text": ["toto"], "constraints": [[]] * 9}, 413, "9 lists of phrases in one request"),
        (
            {"text": ["toto"], "constraints": [["a"]], "beam": 1},
            422,
            "constraints need a beam of at",
        ),
        ({"text": ["toto"], "constraints": [["a"]], "sample": True}, 422, "constraints need beam"),
    ],
)
def test_bad_requests_get_one_line_naming_the_field(client, body, status, fragment):
    answer = client.post("/translate", json=body)
    assert answer.status_code == status
    assert fragment in answer.json()["error"] and "\n" not in answer.json()["error"]


JSON = {"content-type": "application/json"}
ENDS_RIGHT = '; send a JSON object such as {"text": ["..."]}'


@pytest.mark.parametrize(
    "body, error",
    [
        (b'{"text": [', "the body is not valid JSON (Expecting value: line 1 column 11 (char 10))"),
        (b'{"text": ["\xff"]}', "the body is not UTF-8 (byte 0xff at 11)"),
        (  # Python 3.11's parser refuses this depth; 3.12's reads it, an array
            b"[" * 5000 + b"]" * 5000,
            ("the body nests arrays or objects too deeply", "the body is an array"),
        ),
        (
            b'{"text": ["a"], "beam": ' + b"9" * 5000 + b"}",
            "the body has a number of more than 4300 digits",
        ),
    ],
    ids=["truncated", "not UTF-8", "5,000 deep", "5,000 digits"],
)
def test_an_unreadable_body_is_422_naming_why(client, body, error):
    answer = client.post("/translate", content=body, headers=JSON)
    assert answer.status_code == 422
    assert answer.json()["error"].startswith(error) and answer.json()["error"].endswith(ENDS_RIGHT)


@pytest.mark.parametrize("content_type", [None, "text/plain", "application/x-www-form-urlencoded"])
def test_a_body_not_sent_as_json_is_415_saying_so(client, content_type):
    headers = {"content-type": content_type} if content_type else {}
    answer = client.post("/translate", content=b'{"text": ["toto"]}', headers=headers)
    assert answer.status_code == 415
    assert answer.json()["error"] == (
        "the body must be JSON, sent with the header Content-Type: application/json (this one "
        f"came as {content_type or 'no content type'!r})"
    )
    with_charset = {"content-type": "application/json; charset=utf-8"}
    assert client.post("/translate", json={"text": ["toto"]}, headers=with_charset).is_success


@pytest.mark.parametrize(
    "body, status, error",
    [
        (
            {"text": [5] * 8},
            422,
            "text.0: Input should be a valid string; text.1: Input should be a valid string; "
            "text.2: Input should be a valid string; and 5 more",
        ),
        ({"text": [5] * 1000}, 413, "1000 lines in one request; send at most 8"),
        (
            {"text": ["a"], "x" * 5000: 1, "y": 2},
            422,
            f"unknown field '{'x' * 39}…' (and 1 more); allowed: text, "
            + ", ".join([*DecodeConfig.model_fields, "nbest", "attention", "token_scores"])
            + ", prefix, constraints",
        ),
    ],
    ids=["8 wrong lines", "1,000 lines", "a 5,000-character field"],
)
def test_errors_stay_short_however_much_is_wrong(client, body, status, error):
    answer = client.post("/translate", json=body)
    assert (answer.status_code, answer.json()["error"]) == (status, error)


@pytest.mark.parametrize("path", ["/docs", "/redoc", "/openapi.json", "/docs/oauth2-redirect"])
def test_only_the_documented_paths_are_served(client, path):
    answer = client.get(path)
    assert answer.status_code == 404 and answer.json() == {"error": "Not Found"}


def test_wrong_routes_are_json_errors(client):
    assert client.get("/translate").json() == {"error": "Method Not Allowed"}
    assert client.get("/nothing").json() == {"error": "Not Found"}


def test_health_has_one_status_and_the_docs_promise_no_other(client):
    """After SIGTERM the server stops listening at once, so no request can see it stop."""
    assert client.get("/health").json()["status"] == "ok"
    documented = re.findall(r'"status": "(\w+)"', DOC.read_text(encoding="utf-8"))
    assert documented and set(documented) == {"ok"}
    assert '"stopping"' not in DOC.read_text(encoding="utf-8")


def test_a_body_over_the_limit_is_refused_whether_declared_or_streamed(client):
    limit = ServeLimits(max_lines=8, max_chars=100).max_body
    padded = b'{"text": ["toto"]' + b" " * limit + b"}"
    declared = client.post("/translate", content=padded, headers=JSON)
    streamed = client.post("/translate", content=iter([padded[:limit], padded[limit:]]),
                           headers=JSON)  # fmt: skip
    for answer in (declared, streamed):
        assert answer.status_code == 413
        assert answer.json()["error"] == (
            f"the request body is over {limit} bytes; send fewer or shorter lines"
        )


class Held:
    """Makes a translator's searches wait until `release`; `started` once one is waiting."""

    def __init__(self, translator: Translator) -> None:
        self.gate, self.started = threading.Event(), threading.Event()
        self.translate = translator.hypotheses

    def __call__(self, lines, **options):
        self.started.set()
        self.gate.wait(10)
        return self.translate(lines, **options)


def test_a_full_queue_is_503_and_a_slow_answer_504(trained):
    translator = Translator.load(trained)
    held = translator.hypotheses = Held(translator)
    with client_of(translator, max_queue=1, batch_lines=1, timeout=3) as client:
        with ThreadPoolExecutor(2) as pool:
            first = pool.submit(client.post, "/translate", json={"text": ["toto"]})
            assert held.started.wait(5)  # the worker holds the first request
            second = pool.submit(client.post, "/translate", json={"text": ["boka"]})
            while client.get("/health").json()["queued"] < 1:
                time.sleep(0.01)
            full = client.post("/translate", json={"text": ["mimi"]})
            assert full.status_code == 503 and "queue is full" in full.json()["error"]
            held.gate.set()
            assert first.result().status_code == second.result().status_code == 200
    held.gate.clear()
    with client_of(translator, timeout=0.2) as client:
        late = client.post("/translate", json={"text": ["toto"]})
        held.gate.set()
    assert late.status_code == 504 and "no answer within 0.2 s" in late.json()["error"]


def test_a_request_that_timed_out_stops_costing_decoder_time(trained):
    """60 lines searched one at a time, 0.1 s each: the request gives up after 2 s, and
    the next one is answered at once instead of after the other 4 s."""
    translator = Translator.load(trained, batch_tokens=1)  # one line per search
    searched, search = [], translator.search

    def slow(request):
        searched.append(len(request.sources))
        time.sleep(0.1)
        return search(request)

    translator.search = slow
    with client_of(translator, timeout=2.0, max_lines=60) as client:
        late = client.post("/translate", json={"text": ["toto"] * 60})
        assert late.status_code == 504
        after = client.post("/translate", json={"text": ["boka"]})
        assert after.status_code == 200
    assert len(searched) < 40  # 60 + 1 had the first request kept the decoder


def test_an_unexpected_failure_is_a_json_500_for_its_request_alone(trained):
    translator = Translator.load(trained)
    batches, hypotheses = [], translator.hypotheses

    def failing(lines, **options):
        batches.append(lines)
        if "boom" in lines:
            raise RuntimeError("boom")
        if "huge" in lines:
            raise MemoryError
        return hypotheses(lines, **options)

    translator.hypotheses = failing
    texts = ["toto", "boom", "mimi", "huge"]
    with client_of(translator, batch_wait=1.0) as client, ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda t: client.post("/translate", json={"text": [t]}), texts))
    assert len(batches[0]) > 1  # some shared a batch
    assert [answer.status_code for answer in answers] == [200, 500, 200, 503]
    assert answers[1].json()["error"] == (
        "the server failed on this request (RuntimeError: boom); report it if it recurs"
    )
    assert answers[3].json()["error"].startswith("the server ran out of memory on this request")
    good = [answers[0].json(), answers[2].json()]
    expected = [found[0].text for found in hypotheses(["toto", "mimi"])]
    assert [answer["translations"][0]["text"] for answer in good] == expected


def test_sigterm_lets_the_request_in_flight_finish_and_refuses_new_ones(trained, translator):
    process, url = start_server(trained, "--batch-wait-ms", "3000")
    port = int(url.rsplit(":", 1)[1].strip("/"))
    with ThreadPoolExecutor(1) as pool:
        in_flight = pool.submit(httpx2.post, url + "translate", json={"text": LINES}, timeout=30)
        # Signalled once the server holds the request (it waits in its batch for 3 s), not
        # after a fixed sleep, which a loaded machine outlasts before the request is sent.
        deadline = time.monotonic() + 20
        while httpx2.get(url + "health", timeout=5).json()["queued"] < 1:
            assert time.monotonic() < deadline, "the request never reached the server"
            time.sleep(0.02)
        process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
            except ConnectionRefusedError:
                break
            time.sleep(0.05)
        else:
            raise AssertionError("the server still accepts connections after SIGTERM")
        answer = in_flight.result()
    assert answer.status_code == 200
    assert [line["text"] for line in answer.json()["translations"]] == translator.translate(LINES)
    # uvicorn re-raises the signal once it has stopped, so that a supervisor sees why.
    assert process.wait(30) == -signal.SIGTERM


def test_serve_without_the_extra_a_taken_port_or_a_bad_run_is_one_line(
    trained, tmp_path, monkeypatch, capsys
):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert run_cli("serve", "--run", trained, "--port", port) == 2
        assert f"cannot listen on 127.0.0.1:{port} (Address already in use)" in (
            capsys.readouterr().err
        )
    assert run_cli("serve", "--run", tmp_path / "none", "--port", 0) == 2
    assert "is not a run directory (no config.yaml)" in capsys.readouterr().err
    monkeypatch.setitem(sys.modules, "uvicorn", None)  # import uvicorn fails
    assert run_cli("serve", "--run", trained) == 2
    err = capsys.readouterr().err.strip()
    assert "pip install -e '.[serve]'" in err and len(err.splitlines()) == 1, err


def test_a_run_that_decodes_by_mbr_serves_its_choices(trained):
    """The run's decode.mbr reaches the server: its choices, and one line for more
    hypotheses than it has candidates."""
    translator = Translator.load(trained, mbr=3)
    with client_of(translator) as client:
        body = client.post("/translate", json={"text": LINES, "nbest": 2}).json()
        found = [[h["text"] for h in line["hypotheses"]] for line in body["translations"]]
        assert found == translator.translate(LINES, nbest=2)
        answer = client.post("/translate", json={"text": LINES, "nbest": 4})
        assert answer.status_code == 422
        assert answer.json()["error"] == '"nbest": 4 needs as many candidates; set "mbr": 4 or more'


def test_a_requests_ranking_options_are_the_translators(client, translator):
    """Length and coverage penalties and minimum Bayes risk, asked per request."""
    ask = {"beam": 4, "nbest": 2, "length_penalty": 0.5, "coverage_penalty": 0.5, "mbr": 4,
           "mbr_utility": "bleu"}  # fmt: skip
    body = client.post("/translate", json={"text": LINES, **ask}).json()
    found = [[h["text"] for h in line["hypotheses"]] for line in body["translations"]]
    assert found == translator.translate(LINES, **ask)
    assert found != translator.translate(LINES, beam=4, nbest=2)  # the options mattered


def test_a_requests_diverse_beam_search_is_the_translators(client, translator):
    ask = {"beam": 4, "nbest": 4, "beam_groups": 2, "group_diversity": 3.0}
    body = client.post("/translate", json={"text": LINES, **ask}).json()
    found = [[h["text"] for h in line["hypotheses"]] for line in body["translations"]]
    assert found == translator.translate(LINES, **ask)
    assert found != translator.translate(LINES, beam=4, nbest=4)  # the options mattered
    for extra, error in [
        ({"beam_groups": 3}, "beam_groups 3 does not divide beam 4"),
        ({"beam_groups": 2, "constraints": [["Zuqu"], [], [], []]}, "lexical constraints share"),
    ]:
        answer = client.post("/translate", json={"text": LINES, "beam": 4, **extra})
        assert answer.status_code == 422 and error in answer.json()["error"]


def test_a_requests_constraints_are_the_translators(client, translator):
    phrases = [["Zuqu"], [], [], ["Qozoxu", "Foxo"]]
    answer = client.post("/translate", json={"text": LINES, "beam": 4, "constraints": phrases})
    lines = answer.json()["translations"]
    assert [line["text"] for line in lines] == translator.translate(
        LINES, beam=4, constraints=phrases
    )
    assert "Zuqu" in lines[0]["text"] and "Foxo" in lines[3]["text"]
    assert not any(line["unconstrained"] for line in lines)


def test_a_line_whose_phrases_no_hypothesis_held_says_so(trained):
    blocked = {"text": LINES[:1], "beam": 4, "constraints": [["Zuqu Zuqu"]]}
    with client_of(Translator.load(trained, no_repeat_ngram=1)) as client:  # no piece twice
        found = client.post("/translate", json=blocked).json()["translations"][0]
    assert found["unconstrained"] and "Zuqu Zuqu" not in found["text"]


def test_a_request_s_token_scores_are_the_translators(client, translator):
    answer = client.post("/translate", json={"text": LINES, "beam": 3, "token_scores": True})
    lines = answer.json()["translations"]
    found = translator.hypotheses(LINES, beam=3, token_scores=True, attention=False)
    for line, hyps in zip(lines, found, strict=True):
        assert [h["token_scores"] for h in line["hypotheses"]] == [
            translator.token_score_record(t.tokens, t.token_scores) for t in hyps
        ]
    plain = client.post("/translate", json={"text": LINES[:1]}).json()["translations"][0]
    assert plain["hypotheses"][0]["token_scores"] is None

"""Reading a `POST /translate` body into a `TranslateRequest`, or one bounded line saying
what is wrong with it (an `HTTPException`: 415, 413 or 422).

The work is bounded by the body limit and done in an order that keeps it small: the JSON
is parsed once (the standard library's parser, which takes a lone surrogate as the string
it is, so that the line check below can name it), `text` is counted before any of its
items is validated, and an error names at most `MAX_PROBLEMS` problems, each field name
cut short.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from fastapi import HTTPException
from pydantic import ValidationError

from seq2seq.config import DecodeConfig, SourceTags
from seq2seq.config.decode import call_problem
from seq2seq.decode.inputs import text_problem, verbatim_problem
from seq2seq.decode.line_translator import decode_options
from seq2seq.errors import UserError
from seq2seq.serve.schema import SearchOptions, ServeLimits, TranslateRequest

MAX_PROBLEMS = 3
MAX_NAME = 40  # characters of a field name an error quotes
EXAMPLE = '{"text": ["..."]}'


def read_request(body: bytes, content_type: str | None, limits: ServeLimits) -> TranslateRequest:
    """The request a body holds, checked against `limits`."""
    media = (content_type or "").split(";")[0].strip().lower()
    if media != "application/json" and not media.endswith("+json"):
        raise HTTPException(
            415,
            f"the body must be JSON, sent with the header Content-Type: application/json "
            f"(this one came as {short(media) or 'no content type'!r})",
        )
    data = parse_json(body)
    if not isinstance(data, dict):
        kind = {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}
        raise HTTPException(
            422,
            f"the body is {kind.get(type(data), 'a number')}, not a JSON object; "
            f"send one such as {EXAMPLE}",
        )
    check_fields(data, limits)
    try:
        request = TranslateRequest.model_validate(data)
    except ValidationError as error:
        raise HTTPException(422, describe_request_error(error)) from None
    check_text(request, limits)
    return request


def parse_json(body: bytes) -> Any:
    """The body's JSON value; 422 naming why there is none."""
    try:
        return json.loads(body.decode("utf-8"))
    except UnicodeDecodeError as error:
        problem = f"the body is not UTF-8 (byte 0x{body[error.start]:02x} at {error.start})"
    except RecursionError:
        problem = "the body nests arrays or objects too deeply to be a request"
    except json.JSONDecodeError as error:
        problem = f"the body is not valid JSON ({short(str(error), 120)})"
    except ValueError:  # Python's limit on converting digits to an int
        problem = f"the body has a number of more than {sys.get_int_max_str_digits()} digits"
    raise HTTPException(422, f"{problem}; send a JSON object such as {EXAMPLE}")


def check_fields(data: dict[str, Any], limits: ServeLimits) -> None:
    """No unknown field, and no more lines or prefixes than allowed: checked before
    validation, whose work (and errors) would grow with their number."""
    unknown = [key for key in data if key not in TranslateRequest.model_fields]
    if unknown:
        allowed = ", ".join(TranslateRequest.model_fields)
        more = f" (and {len(unknown) - 1} more)" if len(unknown) > 1 else ""
        raise HTTPException(422, f"unknown field {short(unknown[0])!r}{more}; allowed: {allowed}")
    for field in ("text", "prefix", "constraints"):
        lines = data.get(field)
        if isinstance(lines, list) and len(lines) > limits.max_lines:
            noun = {"text": "lines", "prefix": "prefixes", "constraints": "lists of phrases"}[field]
            raise HTTPException(
                413, f"{len(lines)} {noun} in one request; send at most {limits.max_lines}"
            )


def check_text(request: TranslateRequest, limits: ServeLimits) -> None:
    """Each line and prefix fits the limits and the tokenizer can read it; a prefix per line."""
    given = request.prefix
    if given is not None and len(given) != len(request.text):
        raise HTTPException(
            422,
            f"prefix and text differ in length ({len(given)} and {len(request.text)}); send "
            'one prefix per line of text ("" for none)',
        )
    check_constraints(request, limits)
    checks = (("text", request.text, text_problem), ("prefix", given or [], verbatim_problem))
    for field, lines, problem_of in checks:
        for number, line in enumerate(lines):
            if len(line) > limits.max_chars:
                raise HTTPException(
                    413,
                    f"{field}.{number} has {len(line)} characters; send lines of at most "
                    f"{limits.max_chars}",
                )
            problem = problem_of(line)
            if problem is not None:
                raise HTTPException(422, f"{field}.{number}: {problem}")


def check_constraints(request: TranslateRequest, limits: ServeLimits) -> None:
    """A list of phrases per line, each some text the tokenizer can read, a line's within
    the limit of characters (a phrase counts one more)."""
    given = request.constraints
    if given is None:
        return
    if len(given) != len(request.text):
        raise HTTPException(
            422,
            f"constraints and text differ in length ({len(given)} and {len(request.text)}); "
            "send a list of phrases per line of text ([] for none)",
        )
    for number, phrases in enumerate(given):
        size = sum(len(phrase) + 1 for phrase in phrases)
        if size > limits.max_chars:
            raise HTTPException(
                413,
                f"constraints.{number} has {size} characters (one more a phrase); send at "
                f"most {limits.max_chars}",
            )
        for phrase in phrases:
            problem = verbatim_problem(phrase) or (None if phrase.strip() else "an empty phrase")
            if problem is not None:
                raise HTTPException(422, f"constraints.{number}: {problem}")


def check_search(
    request: TranslateRequest, limits: ServeLimits, default: DecodeConfig, tags: SourceTags
) -> SearchOptions:
    """How the request is decoded, from the run's `default`; 422 for bad decoding options
    (a tag or target language the model does not know: `tags`, or none where it needs
    one) or a search over the server's limits."""
    asked = {name: getattr(request, name) for name in DecodeConfig.model_fields}
    try:
        options = decode_options(default, asked)
        tags.pieces(options.tag, options.tgt_lang)
    except UserError as error:
        raise HTTPException(422, str(error)) from None
    beam, nbest = options.beam, request.nbest
    if beam > limits.max_beam:
        raise HTTPException(
            422, f"beam: {beam} is wider than this server allows ({limits.max_beam})"
        )
    if options.sample and max(nbest, options.mbr) > limits.max_beam:
        field, samples = ("mbr", options.mbr) if options.mbr > nbest else ("nbest", nbest)
        raise HTTPException(
            422,
            f"{field}: {samples} samples per line are more than this server allows "
            f"({limits.max_beam})",
        )
    constrained = request.constraints is not None and any(request.constraints)
    problem = call_problem(options, nbest, constrained, json_spelling)
    if problem is not None:
        raise HTTPException(422, problem)
    return SearchOptions.of(nbest, request.attention, request.token_scores, options)


def json_spelling(name: str, value: Any = None) -> str:
    """A request field as messages spell it (`config.decode.Spelling`): `"beam": 3`."""
    return json.dumps(name) if value is None else f"{json.dumps(name)}: {json.dumps(value)}"


def describe_request_error(error: ValidationError) -> str:
    """A malformed request's first problems as one line, each naming its field."""
    problems = []
    for item in error.errors(include_url=False, include_input=False)[:MAX_PROBLEMS]:
        field = ".".join(str(part) for part in item["loc"]) or "body"
        problems.append(f"{field}: {item['msg']}")
    more = error.error_count() - len(problems)
    return "; ".join(problems) + (f"; and {more} more" if more > 0 else "")


def short(text: str, limit: int = MAX_NAME) -> str:
    """`text`, cut to `limit` characters (an ellipsis says so)."""
    return text if len(text) <= limit else text[: limit - 1] + "…"

"""The decoding section of the config (`decode`): the search, its limits and sampling."""

from __future__ import annotations

import typing
from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import Field, PositiveInt, ValidationError, model_validator

from seq2seq.config.section import Section
from seq2seq.config.tokenizer import Symbol

# Wider beams find no better translations (they grow shorter) and cost memory in
# proportion: a beam of 100,000 took 5 GB for one line.
MAX_BEAM = 256
SAMPLING_OPTIONS = ("temperature", "epsilon", "top_k", "top_p")  # what only sampling reads
# The options only the PyTorch engine follows, other than at their defaults: name -> what
# it asks for (CTranslate2 has no such thing; `pytorch_only`).
PYTORCH_ONLY = {
    "sample": "sampling that draws the same whatever the batch",
    "beam_groups": "diverse beam search",
    "shortlist": "vocabulary shortlist",
}


# When beam search ends a sentence (decode.stopping; seq2seq.decode.search.loop).
Stopping = Literal["beam", "early", "exact"]
# What minimum Bayes risk maximises (decode.mbr_utility; seq2seq.decode.search.mbr).
Utility = Literal["chrf", "bleu"]


class DecodeConfig(Section):
    """How `translate`, `evaluate` and the test sets decode (validation is always greedy).

    The one declaration of the decoding options: the commands' options (`seq2seq.cli.
    decoding`), the server's request fields (`seq2seq.serve.schema`) and the keywords of
    `Translator` are these fields, and this section's validators decide which combine."""

    beam: int = Field(
        5,
        ge=1,
        le=MAX_BEAM,
        description="beam size; 1 is greedy search (time and memory grow with it)",
    )
    length_penalty: float = Field(
        1.0,
        ge=0,
        le=10,
        description="alpha: score = log P / length ** alpha (the length counts EOS; as "
        "CTranslate2's); 0: log P",
    )
    coverage_penalty: float = Field(
        0.0,
        ge=0,
        le=100,
        description="beta: each finished score adds beta x the sum over source positions of "
        "log(min(attention paid them, 1)), heads averaged, a position never attended left "
        "out (GNMT's, as CTranslate2's); 0: off",
    )
    beam_groups: int = Field(
        1,
        ge=1,
        le=MAX_BEAM,
        description="diverse beam search: the beam split into this many groups (dividing it), "
        "each ranking its candidates by log P - group_diversity x the number of times the "
        "earlier groups chose the same token at that step; 1: plain beam search",
    )
    group_diversity: float = Field(
        0.5,
        ge=0,
        le=100,
        description="beam_groups: lambda, the penalty per earlier group's choice of a token",
    )
    min_len: int = Field(1, ge=0, description="output tokens before EOS is allowed")
    max_len_ratio: float = Field(
        2.0, gt=0, le=100, description="output limit: ratio x source + offset"
    )
    max_len_offset: int = Field(10, ge=0, le=10_000, description="see max_len_ratio")
    batch_tokens: PositiveInt | None = Field(
        None,
        description="padded source tokens x beam per batch; null: 4,000 on a CPU, 64,000 "
        "on a GPU (whose step costs about the same for many sentences as for a few)",
    )
    stopping: Stopping = Field(
        "beam",
        description="when a sentence's beam search ends: beam, once `beam` hypotheses have "
        "finished (as CTranslate2 and fairseq); early, once no open hypothesis would beat "
        "the n best finished if it ended next; exact, once none could even at the longest "
        "allowed length (at most 256 pieces under exact)",
    )
    no_repeat_ngram: int = Field(
        0,
        ge=0,
        le=1_000,
        description="no output repeats an n-gram of this many tokens (1: no token twice); 0: off",
    )
    sample: bool = Field(
        False,
        description="draw each output from the model's distribution instead of searching "
        "(needs beam 1; n-best lists are that many samples)",
    )
    temperature: float = Field(
        1.0, gt=0, le=100, description="sampling: p ** (1 / temperature), renormalised"
    )
    epsilon: float = Field(
        0.0,
        ge=0,
        lt=1,
        description="sampling: only the tokens of probability at least epsilon (after the "
        "temperature; the most probable always stays); 0: all",
    )
    top_k: int = Field(0, ge=0, description="sampling: only the k most probable tokens; 0: all")
    top_p: float = Field(
        1.0,
        gt=0,
        le=1,
        description="sampling: only the fewest most probable tokens whose mass reaches p",
    )
    tgt_lang: str | None = Field(
        None,
        min_length=1,
        description="the language to translate into, for a model trained into several "
        "(data.target_tags): its tag goes before every source; null: the model's one "
        "(docs/training.md#many-language-pairs)",
    )
    tag: Symbol | None = Field(
        None,
        description="a tag of data.tags put before every source translated (the test sets' "
        "and validation's too): the kind of text to translate as; null: none",
    )
    seed: int = Field(
        1, ge=0, le=2**31 - 1, description="sampling: with the line's index, seeds its draws"
    )
    mbr: int = Field(
        0,
        ge=0,
        le=MAX_BEAM,
        description="minimum Bayes risk: of N candidates (the beam's N best, or with sample "
        "N samples), output the one of highest mean mbr_utility against all N; 0: off",
    )
    mbr_utility: Utility = Field("chrf", description="mbr: the sentence-level metric it uses")
    shortlist: bool = Field(
        False,
        description="a vocabulary shortlist: each batch's output layer computes only the target "
        "pieces its source pieces translate to (IBM model 1 on the training pairs, built into "
        "the run directory the first time), the most frequent ones, and those of its prefixes "
        "and phrases; faster, with outputs that may move (docs/decoding.md)",
    )

    @model_validator(mode="after")
    def _mbr_has_its_candidates(self) -> DecodeConfig:
        if self.mbr and not self.sample and self.beam < self.mbr:
            raise ValueError(
                f"mbr {self.mbr} chooses among a beam's {self.mbr} best; set beam to at least "
                f"{self.mbr}, or sample true"
            )
        if not self.mbr and self.mbr_utility != DecodeConfig.model_fields["mbr_utility"].default:
            raise ValueError("mbr_utility shapes minimum Bayes risk; set mbr N, or leave it out")
        return self

    @model_validator(mode="after")
    def _groups_divide_the_beam(self) -> DecodeConfig:
        if self.beam % self.beam_groups:
            raise ValueError(
                f"beam_groups {self.beam_groups} does not divide beam {self.beam}; give a "
                "beam that is a multiple of it"
            )
        if self.beam_groups > 1 and self.sample:
            raise ValueError(
                "beam_groups splits a beam search, and sample draws instead of searching; set "
                "beam_groups 1, or sample false"
            )
        diversity = DecodeConfig.model_fields["group_diversity"].default
        if self.beam_groups == 1 and self.group_diversity != diversity:
            raise ValueError(
                "group_diversity shapes diverse beam search; set beam_groups, or leave it out"
            )
        return self

    @model_validator(mode="after")
    def _sampling_options_need_sampling(self) -> DecodeConfig:
        if self.sample and self.beam > 1:
            raise ValueError(
                f"sample draws each output alone, not in a beam of {self.beam}; set beam 1 "
                "(an n-best list of N is N samples)"
            )
        defaults = DecodeConfig.model_fields
        changed = [n for n in SAMPLING_OPTIONS if getattr(self, n) != defaults[n].default]
        if changed and not self.sample:
            raise ValueError(f"{changed[0]} shapes sampling; set sample true, or leave it out")
        if self.sample and self.shortlist:
            raise ValueError(
                "shortlist narrows a search's vocabulary, and sample draws from all of it; set "
                "shortlist false, or sample false"
            )
        return self


# What a call asks besides the decode section's fields, on every surface (the command line
# spells them --nbest, --attention FILE, --token-scores FILE, --prefix-file, --constraints;
# the server nbest, attention, token_scores, prefix, constraints; Translator.hypotheses
# nbest, attention, token_scores, prefixes, constraints): how many hypotheses, what to
# record of them and what to hold them to.
PER_CALL_OPTIONS = ("nbest", "attention", "token_scores", "prefixes", "constraints")

# How a surface spells an option in its messages: name and value -> "beam=3" (Python),
# "--beam 3" (the command line), '"beam": 3' (the server); value None: the option alone.
Spelling = Callable[[str, Any], str]


def python_spelling(name: str, value: Any = None) -> str:
    return name if value is None else f"{name}={value!r}"


def call_problem(
    options: DecodeConfig, nbest: int, constrained: bool, spell: Spelling = python_spelling
) -> str | None:
    """Why a call cannot ask `nbest` hypotheses (held to lexical constraints, if
    `constrained`) of a search with `options`, its options spelled by `spell`; or None. The
    rules of what combines within a call, beside the section's own (its validators),
    which every surface asks."""
    asked = spell("nbest", nbest)
    if options.mbr and nbest > options.mbr:
        return f"{asked} needs as many candidates; set {spell('mbr', nbest)} or more"
    if nbest > options.beam and not options.sample:
        return f"{asked} needs a beam at least as wide; set {spell('beam', nbest)}"
    if not constrained:
        return None
    if options.sample:
        return f"lexical constraints need beam search; drop {spell('sample', None)}"
    if options.beam_groups > 1:
        return (
            "lexical constraints share a beam's slots among their banks, not among diverse "
            f"beam search's groups; set {spell('beam_groups', 1)}"
        )
    if options.beam < 2:
        return (
            "lexical constraints need a beam of at least 2 (5 or more place them well); set "
            f"{spell('beam', 5)}"
        )
    return None


def pytorch_only(options: DecodeConfig) -> str | None:
    """What of `options` only the PyTorch engine does (`PYTORCH_ONLY`), or None."""
    for name, what in PYTORCH_ONLY.items():
        if getattr(options, name) != DecodeConfig.model_fields[name].default:
            return what
    return None


def plain_type(name: str) -> type:
    """What the decode field `name` is read as where it is given (an option, a request
    field): bool, int, float or str (a name, or one of a `Literal`'s); its bounds and
    choices are the section's to check (`field_problem`)."""
    annotation = DecodeConfig.model_fields[name].annotation
    kinds = [_bare(a) for a in (annotation, *typing.get_args(annotation))]
    for kind in (bool, int, float):
        if kind in kinds:
            return kind
    return str


def _bare(annotation: Any) -> Any:
    """`int` of `Annotated[int, Gt(0)]` (pydantic's PositiveInt); others as they are."""
    if typing.get_origin(annotation) is Annotated:
        return typing.get_args(annotation)[0]
    return annotation


def field_problem(name: str, value: Any) -> str | None:
    """What is wrong with `value` as the decode field `name` on its own (its type and its
    bounds, pydantic's message), or None; how it combines with the other fields is the
    section's validators' to say, once all are known."""
    try:
        DecodeConfig.model_validate({name: value})
    except ValidationError as error:
        for item in error.errors():
            if tuple(item["loc"]) == (name,):
                return item["msg"].removeprefix("Value error, ")
    return None


# What makes a run's decoding greedy search, as validation and the heatmaps of sweep reports
# translate: beam 1, and no sampling, MBR or groups, their options at their defaults (a
# run that tests with them must still validate).
GREEDY_SEARCH = {"beam": 1, "sample": False, "mbr": 0, "beam_groups": 1, "shortlist": False} | {
    name: DecodeConfig.model_fields[name].default
    for name in ("mbr_utility", "group_diversity", *SAMPLING_OPTIONS)
}

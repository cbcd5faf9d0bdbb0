"""The test decode that ends a run: the checkpoint `train.test_checkpoint` names (and the
last one beside it) translates every `data.test` set into test/, and scores it."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

from seq2seq.checkpoint import (
    average_checkpoints,
    load_checkpoint,
    load_model_weights,
    step_checkpoints,
)
from seq2seq.config import Config
from seq2seq.data.sources import corpus_source
from seq2seq.decode.cpu_weights import packed_weights
from seq2seq.decode.loading import Origin, max_source_pieces
from seq2seq.decode.translate import Translator
from seq2seq.device import out_of_memory_reported
from seq2seq.errors import UserError
from seq2seq.files import atomic_write_text
from seq2seq.metrics import Scores, score_corpus
from seq2seq.models.lora import merged
from seq2seq.train.interrupt import StopSignals
from seq2seq.train.trainer import Trainer


def score_test_sets(
    cfg: Config, out: Path, translator: Translator, log: logging.Logger, checkpoint: str
) -> dict:
    """Translate every `data.test` set into OUT/NAME.hyp and score them into
    OUT/scores.json (OUT: the run's test/, or test/last/ for its last checkpoint);
    CHECKPOINT names the weights in the log lines (`best`, `last`, `average`)."""
    scores: dict[str, dict] = {}
    data = cfg.data
    for spec in data.test:
        corpus, name = corpus_source(spec).read(data.pair(spec)), data.test_name(spec)
        into = data.tgt_lang(spec)
        found = translator.hypotheses(corpus.src, progress=True, attention=False, tgt_lang=into)
        hypotheses = [hyps[0].text if hyps else "" for hyps in found]
        cut = sum(1 for hyps in found if hyps and hyps[0].truncated)
        if cut:
            log.warning(
                "test %s: %d sources longer than %d pieces were cut",
                name,
                cut,
                translator.max_source,
            )
        result: Scores = score_corpus(hypotheses, corpus.tgt)
        atomic_write_text(out / f"{name}.hyp", "".join(h + "\n" for h in hypotheses))
        scores[name] = result.to_dict()
        log.info("test %s (%s): %s", name, checkpoint, result)
    if scores:
        atomic_write_text(out / "scores.json", json.dumps(scores, indent=2) + "\n")
    return scores


def score_test(trainer: Trainer) -> dict:
    """Score the test sets with the checkpoint `train.test_checkpoint` names, and the last
    one beside it. Training is over and saved: a signal now stops at once, and running out
    of memory stops too, each saying how to finish."""
    cfg, run, log = trainer.cfg, trainer.run, trainer.log
    if cfg.train.lora is not None:  # plain layers, to load the merged weights of checkpoints
        merged(trainer.model)
    # Training is over: on the CPU the test sets decode as `seq2seq evaluate` would.
    model = packed_weights(trainer.model) if trainer.device.type == "cpu" else trainer.model
    translator = Translator(
        model,
        trainer.data.tokenizer,
        cfg.decode,
        trainer.device,
        max_source_pieces(cfg),
        tags=cfg.data.source_tags,
    )
    finish = "training is finished and saved: run the same command again to score the test sets"

    def exhausted() -> str:
        return (
            f"out of memory in the test decode with decode.beam={cfg.decode.beam} and "
            f"decode.batch_tokens={translator.batch_tokens(cfg.decode)}; {finish}, lowering them "
            "(--set decode.batch_tokens=N)"
        )

    rule = cfg.train.test_checkpoint
    with (
        out_of_memory_reported(exhausted),
        StopSignals(at_once=f"during the test decode; {finish}"),
    ):
        if rule != "last":  # beside the chosen one, so a reader sees how much the rule matters
            translator.origin = _load_test_weights(trainer, "last")
            score_test_sets(cfg, run.test / "last", translator, log, "last")
        else:  # what an earlier rule left there would read as this run's other scores
            shutil.rmtree(run.test / "last", ignore_errors=True)
        translator.origin = _load_test_weights(trainer, rule)  # its scores.json ends the run
        return score_test_sets(cfg, run.test, translator, log, rule)


def _load_test_weights(trainer: Trainer, rule: str) -> Origin:
    """Load the weights that `train.test_checkpoint` names into the trained model, and
    say where they come from (the run directory, as a loaded translator knows it)."""
    run = trainer.run
    if rule == "average":
        kept = step_checkpoints(run)
        if not kept:
            raise UserError(
                f"train.test_checkpoint=average: {run.checkpoints} keeps no step-N checkpoint "
                "(none is saved before the first validation); use best or last"
            )
        path, state = run.checkpoints, average_checkpoints(kept)
        trainer.log.info("testing the mean of %s", ", ".join(p.stem for p in kept))
    else:
        path = run.resolve_checkpoint(rule)
        state = load_checkpoint(path)
        trainer.log.info("testing %s (%s)", rule, path.name)
    load_model_weights(trainer.model, state, trainer.cfg.model, path)
    step = state.get("step")
    return Origin(run.root, trainer.cfg, path, step if isinstance(step, int) else None)

"""The search strategies (`strategy.Strategy`), and which one the decode options and a
batch ask for: the first of `STRATEGIES` that applies. Which options combine is the
config's to say (`config.decode.call_problem`), before any search."""

from __future__ import annotations

from seq2seq.config import DecodeConfig
from seq2seq.decode.search.constraints import ConstrainedBeamSearch
from seq2seq.decode.search.diverse import DiverseBeamSearch
from seq2seq.decode.search.sampling import Sampler
from seq2seq.decode.search.strategy import BatchFacts, BeamSearch, Strategy

# Most particular first: `BeamSearch` applies to anything.
STRATEGIES: list[type[Strategy]] = [Sampler, DiverseBeamSearch, ConstrainedBeamSearch, BeamSearch]


def strategy_for(decode: DecodeConfig, batch: BatchFacts) -> Strategy:
    """The strategy the options `decode` ask for, for this batch."""
    chosen = next(kind for kind in STRATEGIES if kind.applies(decode, batch))
    return chosen.of(decode, batch)

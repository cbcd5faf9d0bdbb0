"""The languages of a multilingual run: the tag that asks a model for its target language,
and the tags a trained model reads before a source (`SourceTags`), with the rules of which
a translation may or must give."""

from __future__ import annotations

from dataclasses import dataclass

from seq2seq.errors import UserError


def target_tag(language: str) -> str:
    """The piece that asks a model with target tags for `language`: <2en>."""
    return f"<2{language}>"


@dataclass(frozen=True)
class SourceTags:
    """The tags a model was trained to read before a source, each one piece: the target
    language's (`target_tag`, where it has several: `languages` is then `targets`), then
    a tag of data.tags (`tags`)."""

    tags: tuple[str, ...] = ()
    languages: tuple[str, ...] = ()  # the target languages it translates into (empty: unknown)
    targets: tuple[str, ...] = ()  # those with a tag; empty: none

    def pieces(self, tag: str | None, tgt_lang: str | None) -> list[str]:
        """The tags before each source translated into `tgt_lang` (decode.tgt_lang) with
        `tag` (decode.tag); one line for a language or tag the model was not trained with,
        or for no language where it needs one."""
        return [*self._target(tgt_lang), *self._tag(tag)]

    def check(self, tag: str | None, tgt_lang: str | None) -> None:
        """One line for a tag or language given that the model was not trained with (none
        given is no error here: each call may give its own)."""
        if tgt_lang is not None:
            self._target(tgt_lang)
        self._tag(tag)

    def _target(self, language: str | None) -> list[str]:
        known = ", ".join(self.targets)
        if language is None:
            if len(self.targets) > 1:
                raise UserError(
                    f"this model translates into {known}: say which with --tgt-lang "
                    "(decode.tgt_lang; the server's and Translator's tgt_lang)"
                )
            return [target_tag(t) for t in self.targets]
        if not self.targets:
            into = f"into {', '.join(self.languages)} alone" if self.languages else "one way"
            raise UserError(
                f"tgt_lang {language}: this model translates {into}, with no target-language "
                "tag; leave tgt_lang out"
            )
        if language not in self.targets:
            raise UserError(
                f"tgt_lang {language} is not a language this model translates into; give "
                f"one of {known}"
            )
        return [target_tag(language)]

    def _tag(self, tag: str | None) -> list[str]:
        if tag is None:
            return []
        if tag not in self.tags:
            fix = f"give one of {', '.join(self.tags)}" if self.tags else "it was trained with none"
            raise UserError(f"tag {tag} is not one this model was trained with (data.tags); {fix}")
        return [tag]

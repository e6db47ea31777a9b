"""A typed question to the person running the plan, and how a typed answer is read.

The core owns it: approvers answer questions (`human.ask`, planning prompts) whatever
capability asked them.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = ["Answer", "AnswerType", "Question", "parse_answer"]


AnswerType = Literal["string", "boolean", "integer", "number", "choice"]


class Question(BaseModel):
    """Params of `human.ask`."""

    model_config = ConfigDict(extra="forbid")

    question: str = Field(min_length=1, max_length=4000)
    type: AnswerType = "string"
    choices: list[str] | None = Field(None, min_length=1, max_length=50)
    default: Any = None

    @model_validator(mode="after")
    def _consistent(self) -> Question:
        if self.type == "choice" and not self.choices:
            raise ValueError("a 'choice' question needs 'choices'")
        if self.type != "choice" and self.choices:
            raise ValueError("'choices' needs type: choice")
        if self.has_default:
            parse_answer(
                self,
                str(self.default).lower() if isinstance(self.default, bool) else str(self.default),
            )
        return self

    @property
    def has_default(self) -> bool:
        return "default" in self.model_fields_set and self.default is not None


class Answer(BaseModel):
    """Result of `human.ask`."""

    answer: str | bool | int | float


def parse_answer(question: Question, text: str) -> str | bool | int | float:
    """The typed answer for `text`.

    Raises:
        ValueError: with a message saying what is expected.
    """
    value = text.strip()
    if question.type == "string":
        return text.rstrip("\n")
    if question.type == "boolean":
        if value.lower() in {"y", "yes", "true", "1"}:
            return True
        if value.lower() in {"n", "no", "false", "0"}:
            return False
        raise ValueError("answer yes or no")
    if question.type == "integer":
        try:
            return int(value)
        except ValueError:
            raise ValueError("answer with a whole number") from None
    if question.type == "number":
        try:
            return float(value)
        except ValueError:
            raise ValueError("answer with a number") from None
    choices = question.choices or []
    if value in choices:
        return value
    if value.isdigit() and 1 <= int(value) <= len(choices):
        return choices[int(value) - 1]
    raise ValueError("answer with one of: " + ", ".join(choices))
